"""The pretraining recipe: every setting of a run, validated, and the named recipes (quick, paper).

docs/pretraining.md tells how the quick recipe was found and what each setting does.
"""

from __future__ import annotations

from dataclasses import dataclass

from albertlm.config import get_preset
from albertlm.errors import AlbertlmError
from albertlm.optim import scaled_lr
from albertlm.utils import check_field_types


@dataclass(frozen=True)
class PretrainRecipe:
    """Every knob of a pretraining run. The defaults are the built-in quick recipe: albert-mini on the
    King James Bible in under a quarter of an hour on 2 CPU cores, found by the search recorded in
    docs/pretraining.md (a 16-token curriculum, AdamW, bf16 where native, a fast-start init)."""

    preset: str = "albert-mini"
    """Model preset (config.PRESETS); vocab_size comes from the tokenizer."""
    sharing: str | None = None
    """Override the preset's sharing strategy (all, attention, ffn, none)."""
    embedding_size: int | None = None
    """Override the preset's embedding size E."""
    dropout: float | None = None
    """Override the preset's hidden and attention dropout (ALBERT pretrains without dropout: 0)."""
    corpus: str = "kjv"
    """Corpus spec (see data/corpus.py): `kjv`, files, globs, directories."""
    vocab_size: int = 8000
    """SentencePiece vocabulary size (capped at what the corpus supports)."""
    tokenizer: str | None = None
    """An existing vocabulary directory to pretrain with (spiece.model, or a BERT WordPiece vocab.txt
    such as Google's Chinese one), copied into the run; None trains a SentencePiece vocabulary of
    vocab_size on the corpus."""
    max_seq_length: int = 64
    """Tokens per example, [CLS] A [SEP] B [SEP] included (paper: 512; short runs learn faster at 64)."""
    objective: str = "sop"
    """Sentence-level task: sop, nsp or none."""
    masking: str = "dynamic"
    """dynamic (a new mask every epoch) or static (dupe_factor masked copies, as official)."""
    dupe_factor: int = 1
    """Copies of the corpus with different instance splits (and masks, when static)."""
    max_predictions: int = 20
    """Masked positions per example at most (paper: 20 at length 512)."""
    masked_lm_prob: float = 0.15
    """Share of the tokens predicted in training (paper: 0.15). Held-out scoring always masks the
    paper's 15%, so runs with different rates are scored on the same task."""
    max_ngram: int = 3
    """Longest masked span in words, p(n) ∝ 1/n (paper: 3). Held-out scoring always uses 3."""
    curriculum_seq_length: int | None = 16
    """Train the first `curriculum_steps` steps on examples of this many tokens (a second data build),
    with as many more examples per batch as keeps the tokens per step; None: one length throughout.
    Short examples leave the unigram plateau far sooner (docs/pretraining.md); BERT likewise trained
    most steps at 128 tokens before 512. curriculum_steps 0 turns the curriculum off."""
    curriculum_steps: int = 1000
    """Steps at curriculum_seq_length before the switch to max_seq_length."""
    heldout_fraction: float = 0.05
    """Documents held out for evaluation (5% of the KJV's 1,189 chapters: about 400 examples)."""
    batch_size: int = 32
    """Global batch: per-device micro-batch x accumulation x world size (paper: 4096)."""
    micro_batch_size: int | None = None
    """Examples per forward pass on one device (default: the whole per-device batch)."""
    steps: int = 3500
    """Optimizer steps."""
    warmup_steps: int = 200
    """Linear warmup steps."""
    lr: float | None = 1e-3
    """Peak learning rate. None scales the paper's 0.00176 at batch 4096 by sqrt(batch/4096); that rule
    gives 1.6e-4 at batch 32, far too low for a run of a few thousand steps, hence the quick recipe's 1e-3."""
    position_init: str = "sinusoidal"
    """Starting point of the learned position table: normal (official) or sinusoidal."""
    token_type_init: str = "zero"
    """Starting point of the segment table: normal (official) or zero."""
    projection_init: str = "unit"
    """Starting point of the E→H projection: normal (official, std 0.02) or unit (std 1/sqrt(E))."""
    optimizer: str = "adamw"
    """lamb (paper) or adamw."""
    weight_decay: float = 0.01
    """Decoupled weight decay (LayerNorm and biases excluded)."""
    precision: str = "auto"
    """auto (bf16 where the hardware has native bf16, else fp32), fp32, bf16 or fp16 (GPU)."""
    clip_norm: float = 1.0
    """Global gradient-norm clip."""
    on_nonfinite: str = "skip"
    """skip or stop when the loss or gradient norm is not finite."""
    eval_every: int = 500
    """Evaluate on the held-out split every N steps (and at the end)."""
    eval_examples: int = 2048
    """Held-out examples per evaluation at most."""
    log_every: int = 10
    """Write training metrics every N steps."""
    checkpoint_every: int = 500
    """Save a full checkpoint every N steps (and at the end)."""
    keep_last: int = 2
    """Checkpoints kept (the best by held-out accuracy at [MASK] positions is kept too)."""
    seed: int = 0
    """Seed of the tokenizer sample, the data, the initialisation and the data order."""
    data_seed: int | None = None
    """Seed of the tokenizer's sample and the data build (None: `seed`). Runs that differ only in
    `seed` can then share one tokenizer and data build."""
    workers: int = 2
    """Processes for the data build."""
    activation_checkpointing: bool = False
    """Recompute encoder blocks in the backward pass (saves activation memory)."""
    compile: bool = False
    """torch.compile the model."""
    data_parallel: str = "ddp"
    """ddp or fsdp when launched with torchrun."""

    def __post_init__(self) -> None:
        check_field_types(self)
        choices = {"objective": ("sop", "nsp", "none"), "masking": ("dynamic", "static"),
                   "optimizer": ("lamb", "adamw"), "position_init": ("normal", "sinusoidal"),
                   "token_type_init": ("normal", "zero"), "projection_init": ("normal", "unit"), "precision": ("auto", "fp32", "bf16", "fp16"),
                   "on_nonfinite": ("skip", "stop"), "data_parallel": ("ddp", "fsdp"),
                   "sharing": (None, "all", "attention", "ffn", "none")}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise AlbertlmError(f"{name} must be one of {', '.join(map(str, allowed))}, got {getattr(self, name)!r}")
        for name in ("vocab_size", "max_seq_length", "dupe_factor", "max_predictions", "max_ngram", "batch_size", "steps",
                     "eval_every", "eval_examples", "log_every", "checkpoint_every", "workers"):
            if getattr(self, name) <= 0:
                raise AlbertlmError(f"{name} must be positive, got {getattr(self, name)}")
        if self.curriculum_seq_length is not None and not 8 <= self.curriculum_seq_length < self.max_seq_length:
            raise AlbertlmError(f"curriculum_seq_length must be in [8, max_seq_length), got {self.curriculum_seq_length}")
        if not 0 <= self.curriculum_steps <= self.steps:
            raise AlbertlmError(f"curriculum_steps must be in [0, steps], got {self.curriculum_steps}")
        if not 0.0 < self.masked_lm_prob < 1.0:
            raise AlbertlmError(f"masked_lm_prob must be in (0, 1), got {self.masked_lm_prob}")
        if self.dropout is not None and not 0.0 <= self.dropout < 1.0:
            raise AlbertlmError(f"dropout must be in [0, 1), got {self.dropout}")
        get_preset(self.preset)  # an unknown preset fails here, before any work
        if self.warmup_steps < 0 or not 0.0 < self.heldout_fraction < 1.0:
            raise AlbertlmError("warmup_steps must be >= 0 and heldout_fraction in (0, 1)")

    def per_device_batch(self, world_size: int, curriculum: bool = False) -> tuple[int, int]:
        """(micro-batch size, accumulation steps) for this world size; with `curriculum`, of the
        short-example phase, whose micro-batches hold max_seq_length // curriculum_seq_length times
        as many examples (the same token slots)."""
        if self.batch_size % world_size:
            raise AlbertlmError(f"batch_size {self.batch_size} is not divisible by the {world_size} processes")
        per_device = self.batch_size // world_size
        micro = self.micro_batch_size or per_device
        if curriculum:
            factor = self.max_seq_length // (self.curriculum_seq_length or self.max_seq_length)
            per_device, micro = per_device * factor, micro * factor
        if per_device % micro:
            raise AlbertlmError(f"the per-device batch {per_device} is not divisible by micro_batch_size {micro}")
        return micro, per_device // micro

    @property
    def build_seed(self) -> int:
        """The seed of the tokenizer and data stages."""
        return self.seed if self.data_seed is None else self.data_seed

    @property
    def peak_lr(self) -> float:
        return self.lr if self.lr is not None else scaled_lr(self.batch_size)


RECIPES: dict[str, PretrainRecipe] = {
    # The built-in run: albert-mini on the King James Bible in under 15 minutes on 2 CPU cores.
    "quick": PretrainRecipe(),
    # The paper's recipe (§4.1 and the official code): albert-base, 512 tokens, batch 4096, LAMB at
    # 0.00176 with 3,125 warmup steps, 125k steps, 15% n-gram masking with at most 20 predictions.
    "paper": PretrainRecipe(preset="albert-base", vocab_size=30000, max_seq_length=512, batch_size=4096,
                            steps=125_000, warmup_steps=3125, lr=0.00176, optimizer="lamb", precision="fp32",
                            masked_lm_prob=0.15, max_predictions=20, max_ngram=3, position_init="normal",
                            token_type_init="normal", projection_init="normal", curriculum_seq_length=None,
                            curriculum_steps=0, eval_every=5000, checkpoint_every=5000, log_every=100),
}
