"""The pretraining recipe: every setting of a run, validated, and the named recipes (quick, paper).

docs/pretraining.md tells how the quick recipe was found and what each setting does.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from albertlm.config import get_preset
from albertlm.data.build import BuildSettings
from albertlm.errors import AlbertlmError
from albertlm.optim import scaled_lr
from albertlm.utils import check_field_types


QUICK_BUILD = BuildSettings(max_seq_length=64, heldout_fraction=0.05, workers=2)
"""The quick recipe's data build: 64-token examples, 5% of the documents held out (the KJV's 1,189
chapters give about 400 held-out examples), two build processes; the rest as the paper."""

BUILD_FIELDS = tuple(f.name for f in dataclasses.fields(BuildSettings) if f.name != "seed")
"""Settings of the recipe's build, which `with_settings` and the command line take by their own names."""


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
    build: BuildSettings = QUICK_BUILD
    """How examples are made from the corpus (data/build.py): their length (paper: 512; short runs
    learn faster at 64), the sentence-level objective (sop, nsp, none), static or dynamic masking,
    the masking rate and n-gram length, the held-out share. Its `seed` is replaced by `data_seed`.
    Held-out scoring always masks the paper's 15% in 3-grams, so runs are scored on the same task."""
    token_objective: Literal["mlm", "rtd"] = "mlm"
    """The token-level objective (the build's `objective` is the sentence-level one): mlm, the masked
    LM of the paper; rtd, ELECTRA's replaced-token detection (Clark et al. 2020): a small generator
    fills the masked positions by sampling, and the model learns to tell, for every token, original
    from replaced. The saved model is then the discriminator, an AlbertModel without an MLM head
    (docs/pretraining.md)."""
    generator_size: float = 0.25
    """With rtd: the generator's hidden size as a fraction of the model's, in (0, 1], rounded to whole
    attention heads (ELECTRA: 1/4 to 1/2 work best). It shares the model's embedding tables."""
    rtd_weight: float = 50.0
    """With rtd: the weight of the replaced-token loss against the generator's MLM loss (ELECTRA's
    lambda = 50)."""
    curriculum_seq_length: int | None = 16
    """Train the first `curriculum_steps` steps on examples of this many tokens (a second data build),
    with as many more examples per batch as keeps the tokens per step; None: one length throughout.
    Short examples leave the unigram plateau far sooner (docs/pretraining.md); BERT likewise trained
    most steps at 128 tokens before 512. curriculum_steps 0 turns the curriculum off."""
    curriculum_steps: int = 1000
    """Steps at curriculum_seq_length before the switch to max_seq_length."""
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
    activation_checkpointing: bool = False
    """Recompute encoder blocks in the backward pass (saves activation memory)."""
    compile: bool = False
    """torch.compile the model."""
    data_parallel: str = "ddp"
    """ddp or fsdp when launched with torchrun."""

    def __post_init__(self) -> None:
        check_field_types(self)
        if not isinstance(self.build, BuildSettings):
            raise AlbertlmError(f"build must be a BuildSettings, got {type(self.build).__name__}")
        choices = {"optimizer": ("lamb", "adamw"), "position_init": ("normal", "sinusoidal"),
                   "token_type_init": ("normal", "zero"), "projection_init": ("normal", "unit"),
                   "precision": ("auto", "fp32", "bf16", "fp16"), "on_nonfinite": ("skip", "stop"),
                   "data_parallel": ("ddp", "fsdp"), "sharing": (None, "all", "attention", "ffn", "none"),
                   "token_objective": ("mlm", "rtd")}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise AlbertlmError(f"{name} must be one of {', '.join(map(str, allowed))}, got {getattr(self, name)!r}")
        for name in ("vocab_size", "batch_size", "steps", "eval_every", "eval_examples", "log_every", "checkpoint_every"):
            if getattr(self, name) <= 0:
                raise AlbertlmError(f"{name} must be positive, got {getattr(self, name)}")
        length = self.build.max_seq_length
        if self.curriculum_seq_length is not None and not 8 <= self.curriculum_seq_length < length:
            raise AlbertlmError(f"curriculum_seq_length must be in [8, max_seq_length), got {self.curriculum_seq_length}")
        if not 0 <= self.curriculum_steps <= self.steps:
            raise AlbertlmError(f"curriculum_steps must be in [0, steps], got {self.curriculum_steps} of "
                                f"{self.steps} steps (--curriculum-steps sets it)")
        if not 0.0 < self.generator_size <= 1.0:
            raise AlbertlmError(f"generator_size must be in (0, 1], got {self.generator_size} (--generator-size)")
        if self.rtd_weight < 0:
            raise AlbertlmError(f"rtd_weight must be >= 0, got {self.rtd_weight} (--rtd-weight)")
        if self.dropout is not None and not 0.0 <= self.dropout < 1.0:
            raise AlbertlmError(f"dropout must be in [0, 1), got {self.dropout}")
        get_preset(self.preset)  # an unknown preset fails here, before any work
        if self.warmup_steps < 0:
            raise AlbertlmError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.build.heldout_fraction <= 0:
            raise AlbertlmError("heldout_fraction must be in (0, 1): pretraining scores the held-out split")

    def with_settings(self, **changes: Any) -> PretrainRecipe:
        """This recipe with fields changed, the build's among them by their own names
        (`max_seq_length=128`, `objective="nsp"`), as the command line takes them.

        A step count given without its curriculum keeps the recipe's share of curriculum steps
        (the quick recipe's 1,000 of 3,500 become 171 of 600), so a shorter run is not refused
        for a default the user never set."""
        if "steps" in changes and "curriculum_steps" not in changes and self.curriculum_steps:
            changes["curriculum_steps"] = round(self.curriculum_steps * changes["steps"] / self.steps)
        build = {k: changes.pop(k) for k in list(changes) if k in BUILD_FIELDS}
        if build:
            changes["build"] = dataclasses.replace(changes.get("build", self.build), **build)
        return dataclasses.replace(self, **changes)

    def build_settings(self, max_seq_length: int | None = None) -> BuildSettings:
        """The settings of this run's data build (of the curriculum's, given its length)."""
        return dataclasses.replace(self.build, seed=self.build_seed,
                                   max_seq_length=max_seq_length or self.build.max_seq_length)

    def per_device_batch(self, world_size: int, curriculum: bool = False) -> tuple[int, int]:
        """(micro-batch size, accumulation steps) for this world size; with `curriculum`, of the
        short-example phase, whose micro-batches hold max_seq_length // curriculum_seq_length times
        as many examples (the same token slots)."""
        if self.batch_size % world_size:
            raise AlbertlmError(f"batch_size {self.batch_size} is not divisible by the {world_size} processes")
        per_device = self.batch_size // world_size
        micro = self.micro_batch_size or per_device
        if curriculum:
            length = self.build.max_seq_length
            factor = length // (self.curriculum_seq_length or length)
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


def flat_settings(recipe: dict[str, Any]) -> dict[str, Any]:
    """A recipe as a dict (recipe.json) by its command-line names: the build's settings beside the
    rest. Recipes written before the build settings were grouped are flat already."""
    build = {k: v for k, v in recipe.get("build", {}).items() if k != "seed"}  # its seed is data_seed
    return {**{k: v for k, v in recipe.items() if k != "build"}, **build}


def pretrain_command(recipe: dict[str, Any], name: str, out_dir: str) -> str:
    """The `albertlm pretrain` command line that runs a recipe (as recipe.json holds it): the
    settings that differ from the quick recipe, as flags."""
    import shlex

    defaults = flat_settings(dataclasses.asdict(PretrainRecipe()))
    args = ["albertlm", "pretrain", "--name", name, "--out-dir", out_dir, "--no-progress"]
    for k, v in flat_settings(recipe).items():
        if v != defaults.get(k) and v is not None:  # None only where another flag turns the feature off
            flag = k.replace("_", "-")
            args += [f"--{flag}" if v else f"--no-{flag}"] if isinstance(v, bool) else [f"--{flag}", str(v)]
    return shlex.join(args)


RECIPES: dict[str, PretrainRecipe] = {
    # The built-in run: albert-mini on the King James Bible in under 15 minutes on 2 CPU cores.
    "quick": PretrainRecipe(),
    # The paper's recipe (§4.1 and the official code): albert-base, 512 tokens, batch 4096, LAMB at
    # 0.00176 with 3,125 warmup steps, 125k steps, 15% n-gram masking with at most 20 predictions.
    "paper": PretrainRecipe(preset="albert-base", vocab_size=30000, batch_size=4096,
                            build=BuildSettings(max_seq_length=512, masked_lm_prob=0.15, max_predictions=20,
                                                max_ngram=3, heldout_fraction=0.05, workers=2),
                            steps=125_000, warmup_steps=3125, lr=0.00176, optimizer="lamb", precision="fp32",
                            position_init="normal",
                            token_type_init="normal", projection_init="normal", curriculum_seq_length=None,
                            curriculum_steps=0, eval_every=5000, checkpoint_every=5000, log_every=100),
}
