"""Replaced-token detection (ELECTRA; Clark et al., ICLR 2020) as pretraining's token objective.

    masked input ──► generator: a narrower ALBERT over the discriminator's embeddings     §3.1
                     (word, position and type tables shared, as ELECTRA shares them §3.2),
                     its MLM head decoding through the shared word table
                 ──► sample a token at every masked position from the generator's softmax
                     (a torch.Generator per example; no gradient flows through the sample)
    corrupted input ──► discriminator: the ALBERT being trained (backbone + pooler)
                 ──► RTD head: dense H→H, activation, dense H→1 per token (1 = replaced)
    loss = generator MLM + rtd_weight · RTD (λ = 50 in ELECTRA §3.1) + the sentence objective

A position counts as replaced when the sampled token differs from the original; a sample that
draws the original counts as original (ELECTRA §2). The RTD loss is averaged over every
non-padding token of the step, [CLS] and [SEP] included, as ELECTRA's discriminator loss is.
The masking is the MLM objective's own (data/masking.py: whole-word n-grams, 80/10/10), so the
generator sees exactly what an MLM run's model sees.

What is the model: the discriminator's backbone. `ReplacedTokenDetection.save_discriminator`
writes it as an ordinary AlbertModel directory; the generator, the RTD head and the discriminator's
sentence-order head are training state, kept beside it in checkpoints only (TRAINING_STATE_FILE),
a file that loaders of ALBERT directories ignore. docs/pretraining.md tells why no MLM head is
saved.

This module is not model.py on purpose: ELECTRA's generator and head are not part of ALBERT
(docs/STYLE principle 2), and the saved product is a plain ALBERT.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from albertlm.config import AlbertConfig
from albertlm.errors import AlbertlmError
from albertlm.model import AlbertModel, Embeddings, Encoder, MLMHead, PreTrainedAlbert, activation, attention_bias
from albertlm.train.mlm_eval import TokenBaselines, evaluate, mask_accuracy_sums
from albertlm.vocab import IGNORE_INDEX
from albertlm.config import PRETRAINING_KEY

TRAINING_STATE_FILE = "rtd_training.safetensors"
"""The generator, RTD head and sentence-order head of an rtd run, beside a checkpoint's model.safetensors."""

CONFIG_KEY = PRETRAINING_KEY
"""config.json entry of an rtd run's directories: {"token_objective": "rtd", "generator_hidden_size": ...}."""

_SAMPLING_TAG = 0x727464  # "rtd": keeps the sampling stream apart from any other seeded by the same numbers


# ---------------------------------------------------------------------------- the networks
def generator_config(config: AlbertConfig, size: float) -> AlbertConfig:
    """The generator's shape: the discriminator's depth, sharing and head width, about `size` x its
    hidden size, rounded to whole attention heads (at least one), the FFN scaled alike.

    ELECTRA's generators keep 64-wide heads and shrink the hidden size (§3.2: 1/4 to 1/2 of the
    discriminator's works best); keeping the head width does the same at any preset.
    """
    head = config.hidden_size // config.num_attention_heads
    heads = max(1, round(config.hidden_size * size / head))
    hidden = heads * head
    ffn = max(1, round(config.intermediate_size * hidden / config.hidden_size))
    return config.replace(hidden_size=hidden, num_attention_heads=heads, intermediate_size=ffn, extra={})


class Generator(nn.Module):
    """A small ALBERT MLM without embeddings of its own: E→H_g projection, encoder, MLM head, all
    reading and decoding through the `Embeddings` it is handed (the discriminator's)."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.config = config
        self.project = nn.Linear(config.embedding_size, config.hidden_size)
        self.encoder = Encoder(config)
        self.mlm = MLMHead(config)

    def forward(self, embeddings: Embeddings, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                token_type_ids: torch.Tensor | None, prediction_mask: torch.Tensor) -> torch.Tensor:
        """Logits at the masked positions.

        Args:
            embeddings: the shared tables.
            input_ids, attention_mask, token_type_ids: [B, S], the masked input.
            prediction_mask: bool [B, S], the positions to predict.
        Returns:
            [N, V], one row per True of `prediction_mask`, row-major.
        """
        h = self.project(embeddings(input_ids, token_type_ids, None))  # [B, S, H_g]
        h, _ = self.encoder(h, attention_bias(attention_mask))  # [B, S, H_g]
        return self.mlm(h[prediction_mask], embeddings)  # [N, V]


class RTDHead(nn.Module):
    """ELECTRA's discriminator head: dense H→H, activation, dense H→1 (the logit of "replaced")."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = activation(config.hidden_act)
        self.out = nn.Linear(config.hidden_size, 1)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """h [B, S, H] -> logits [B, S]."""
        x = self.act(self.dense(h))  # [B, S, H]
        return x @ self.out.weight[0] + self.out.bias  # [B, S] (a fresh tensor, not a view FSDP would warn of)


@dataclass
class RTDOutput:
    mlm_loss: torch.Tensor
    """The generator's mean cross-entropy over the masked positions."""
    prediction_logits: torch.Tensor
    """The generator's [N, V], one row per True of `prediction_mask` (as AlbertForPreTrainingOutput)."""
    prediction_mask: torch.Tensor
    """bool [B, S]: the masked positions."""
    rtd_loss_sum: torch.Tensor
    """Binary cross-entropy of the RTD head summed over the real tokens (the caller normalises)."""
    rtd_logits: torch.Tensor
    """[B, S]: > 0 predicts replaced."""
    replaced: torch.Tensor
    """bool [B, S]: where the sampled token differs from the original."""
    real: torch.Tensor
    """bool [B, S]: the non-padding tokens the RTD loss covers."""
    sop_logits: torch.Tensor
    """[B, 2]: the discriminator's sentence-order logits."""
    sop_loss: torch.Tensor | None = None
    """Mean cross-entropy of the sentence-order head, when labels were given."""


def sample_replacements(logits: torch.Tensor, rows: torch.Tensor, samplers: Sequence[torch.Generator]) -> torch.Tensor:
    """One token per row of `logits` drawn from its softmax, without gradient.

    Each example's draws come from its own generator (inverse-CDF sampling of uniforms drawn on the
    CPU), so a draw depends on the example and its sampler alone, not on the rest of the batch:
    a batch split over ranks or micro-batches draws what the whole batch would.

    Args:
        logits: [N, V], one row per masked position.
        rows: int64 [N], the example (batch row) of each masked position, ascending.
        samplers: one CPU torch.Generator per example of the batch.
    Returns:
        int64 [N] token ids.
    """
    with torch.no_grad():
        counts = torch.bincount(rows.cpu(), minlength=len(samplers)).tolist()
        u = torch.cat([torch.rand(n, generator=g) for n, g in zip(counts, samplers)])  # [N], on the CPU
        cdf = torch.softmax(logits.detach().float(), dim=-1).cumsum_(-1)  # [N, V]
        x = (u.to(cdf.device) * cdf[:, -1]).unsqueeze(1)  # [N, 1], inside each row's total mass
        return torch.searchsorted(cdf, x, right=True).squeeze(1).clamp_(max=cdf.shape[-1] - 1)  # [N]


def sampler_for(*keys: int) -> torch.Generator:
    """A CPU torch.Generator seeded by mixing non-negative `keys` (seed, stream, step, example)."""
    seed = int(np.random.SeedSequence([_SAMPLING_TAG, *keys]).generate_state(1, np.uint64)[0])
    return torch.Generator().manual_seed(seed)


class ReplacedTokenDetection(PreTrainedAlbert):
    """Generator + discriminator (+ RTD and sentence-order heads) trained together; see the module
    docstring. `config` is the discriminator's: the model the run produces."""

    def __init__(self, config: AlbertConfig, generator_size: float = 0.25):
        super().__init__()
        if config.projects_words:
            raise AlbertlmError(f"token_objective rtd needs ALBERT's embedding layout (the generator shares the "
                                f"E-wide tables), not embedding_layout {config.embedding_layout!r}")
        gen = generator_config(config, generator_size)
        self.config = config.replace(extra={**config.extra, CONFIG_KEY: {
            "token_objective": "rtd", "generator_hidden_size": gen.hidden_size}})
        self.discriminator = AlbertModel(self.config)
        self.rtd = RTDHead(config)
        self.sop = nn.Linear(config.hidden_size, 2)
        self.generator = Generator(gen)
        self.init_weights()

    def init_embeddings(self, position: str = "normal", token_type: str = "normal", projection: str = "normal") -> None:
        """PreTrainedAlbert.init_embeddings, the generator's E→H_g projection started alike."""
        super().init_embeddings(position, token_type, projection)
        if projection == "unit":
            nn.init.normal_(self.generator.project.weight, mean=0.0, std=1.0 / math.sqrt(self.config.embedding_size))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                sentence_order_label: torch.Tensor | None = None, *,
                samplers: Sequence[torch.Generator]) -> RTDOutput:
        """One ELECTRA forward pass.

        Args:
            input_ids, attention_mask, token_type_ids: [B, S], the masked input (data/masking.py).
            labels: [B, S], the original token at masked positions, -100 elsewhere.
            sentence_order_label: [B], for the discriminator's sentence-order loss (optional).
            samplers: one CPU torch.Generator per example, for its replacement draws.
        Returns:
            RTDOutput.
        """
        if labels is None or len(samplers) != len(input_ids):
            raise ValueError(f"ReplacedTokenDetection needs the labels and one sampler per example "
                             f"({len(input_ids)}), got {len(samplers)}")
        prediction_mask = labels != IGNORE_INDEX  # [B, S]
        shared = self.discriminator.embeddings
        logits = self.generator(shared, input_ids, attention_mask, token_type_ids, prediction_mask)  # [N, V]
        targets = labels[prediction_mask]  # [N]
        mlm_loss = F.cross_entropy(logits.float(), targets) if targets.numel() else logits.sum() * 0.0
        with torch.no_grad():
            original = torch.where(prediction_mask, labels, input_ids)  # [B, S]
            corrupted = original.clone()
            corrupted[prediction_mask] = sample_replacements(logits, prediction_mask.nonzero()[:, 0], samplers)
            replaced = corrupted != original  # [B, S]
            real = attention_mask.bool() if attention_mask is not None else torch.ones_like(replaced)
        out = self.discriminator(corrupted, attention_mask, token_type_ids)
        rtd_logits = self.rtd(out.last_hidden_state)  # [B, S]
        rtd_loss_sum = F.binary_cross_entropy_with_logits(rtd_logits[real].float(), replaced[real].float(),
                                                          reduction="sum")
        sop_logits = self.sop(out.pooler_output)  # [B, 2]
        sop_loss = (F.cross_entropy(sop_logits.float(), sentence_order_label.reshape(-1))
                    if sentence_order_label is not None else None)
        return RTDOutput(mlm_loss=mlm_loss, prediction_logits=logits, prediction_mask=prediction_mask,
                         rtd_loss_sum=rtd_loss_sum, rtd_logits=rtd_logits, replaced=replaced, real=real,
                         sop_logits=sop_logits, sop_loss=sop_loss)

    # ------------------------------------------------------------------ files
    def _split(self, state_dict: dict[str, torch.Tensor] | None) -> tuple[dict, dict]:
        """(the discriminator's tensors by its own names, the training-only tensors by ours)."""
        sd = state_dict if state_dict is not None else self.state_dict()
        prefix = "discriminator."
        return ({k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix)},
                {k: v for k, v in sd.items() if not k.startswith(prefix)})

    def save_discriminator(self, path: str | Path, state_dict: dict[str, torch.Tensor] | None = None) -> None:
        """Write the model the run produces: the discriminator's backbone as an AlbertModel directory
        (config.json + model.safetensors), which transformers' AlbertModel and `albertlm finetune` load.

        Args:
            path: the directory.
            state_dict: this module's full state (our names) instead of its own, e.g. gathered from FSDP.
        """
        from albertlm.interop.hf import save_pretrained

        save_pretrained(self.discriminator, path, state_dict=self._split(state_dict)[0])

    def save_pretrained(self, path: str | Path, state_dict: dict[str, torch.Tensor] | None = None) -> None:
        """The checkpoint form: `save_discriminator`, and the generator, RTD head and sentence-order head
        in TRAINING_STATE_FILE beside it (safetensors, our names), for exact resume."""
        from safetensors.torch import save_file

        from albertlm.utils import atomic_path

        self.save_discriminator(path, state_dict)
        rest = {k: v.detach().cpu().contiguous() for k, v in self._split(state_dict)[1].items()}
        with atomic_path(Path(path) / TRAINING_STATE_FILE) as tmp:
            save_file(rest, str(tmp), metadata={"format": "pt"})

    def load_state_from(self, path: str | Path) -> None:
        """Restore every weight from a directory `save_pretrained` wrote (training resume)."""
        from albertlm.interop.hf import load_safetensors, load_state_into

        path = Path(path)
        load_state_into(self.discriminator, path)
        file = path / TRAINING_STATE_FILE
        if not file.is_file():
            raise AlbertlmError(f"{file}: missing; the checkpoint holds no generator or RTD head "
                                "(it is not from a token_objective rtd run)")
        tensors = load_safetensors(file)
        own = self._split(None)[1]
        problems = sorted(set(own) ^ set(tensors)) or [k for k in own if own[k].shape != tensors[k].shape]
        if problems:
            raise AlbertlmError(f"{file}: does not match this run's generator and heads (first: {problems[0]}); "
                                "the generator_size differs?")
        self.load_state_dict(tensors, strict=False)


# ---------------------------------------------------------------------------- the objective
class RTDObjective:
    """What `pretrain` does for token_objective "rtd": the model it builds, its step loss and metrics,
    held-out scoring and the directory it exports (pretrain.MaskedLM is the "mlm" counterpart).

    Args:
        seed: the run's seed. The sampler of the example at position i of step k's global batch
            (in the data stream's order) is seeded by (seed, 0, k, i): a resumed run draws what
            the uninterrupted one drew, and W processes what one does.
        generator_size: the generator's hidden size as a fraction of the discriminator's.
        rtd_weight: the weight of the RTD loss (ELECTRA's λ).
        mask_id: the vocabulary's [MASK] (accuracy at [MASK] positions).
    """

    name = "rtd"
    best_metric: str | None = None
    """The held-out RTD score moves with the generator (a better generator makes the task harder),
    so an rtd run tracks no best checkpoint, only the latest ones."""

    def __init__(self, seed: int, generator_size: float, rtd_weight: float, mask_id: int):
        self.seed, self.generator_size, self.rtd_weight, self.mask_id = seed, generator_size, rtd_weight, mask_id

    def build(self, config: AlbertConfig) -> ReplacedTokenDetection:
        return ReplacedTokenDetection(config, self.generator_size)

    @staticmethod
    def prepare(micro_batches: list[dict[str, torch.Tensor]], index: int, rank: int, world_size: int
                ) -> list[dict[str, torch.Tensor]]:
        """Give step `index`'s micro-batches their examples' sampling keys: "sampling_keys", int64
        [B, 2] on the CPU, (step, position in the global batch). Rank r of W takes the data stream's
        positions r, r + W, ... (data/loader.py), its micro-batches one after another."""
        offset = 0
        for batch in micro_batches:
            B = len(batch["input_ids"])
            positions = rank + (offset + torch.arange(B)) * world_size  # [B]
            batch["sampling_keys"] = torch.stack([torch.full_like(positions, index), positions], dim=1)  # [B, 2]
            offset += B
        return micro_batches

    @staticmethod
    def counts(batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """The targets each loss averages over: masked positions, examples, real tokens."""
        return {"masked": float((batch["labels"] != IGNORE_INDEX).sum()), "examples": float(len(batch["labels"])),
                "tokens": float(batch["attention_mask"].sum())}

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor], totals: dict[str, float]):
        """Generator MLM + rtd_weight x RTD + sentence objective of a micro-batch, each normalised by
        its global target count; with the metric sums the log reports."""
        inputs = {k: v for k, v in batch.items() if k != "sampling_keys"}
        samplers = [sampler_for(self.seed, 0, *key) for key in batch["sampling_keys"].tolist()]  # stream 0: training
        out = model(**inputs, samplers=samplers)
        n = self.counts(batch)
        loss = (out.mlm_loss * (n["masked"] / max(totals["masked"], 1.0))
                + self.rtd_weight * out.rtd_loss_sum / max(totals["tokens"], 1.0)
                + out.sop_loss * (n["examples"] / totals["examples"]))
        with torch.no_grad():
            correct, at_mask = mask_accuracy_sums(out, batch, self.mask_id)
            sums = _rtd_sums(out)
            sop_correct = float((out.sop_logits.argmax(-1) == batch["sentence_order_label"]).sum())
        metrics = {"mlm_loss_sum": float(out.mlm_loss.detach()) * n["masked"], "mlm_mask_correct": correct,
                   "mlm_mask_count": at_mask, "sop_loss_sum": float(out.sop_loss.detach()) * n["examples"],
                   "sop_correct": sop_correct, **sums}
        return loss, metrics

    @staticmethod
    def train_metrics(m: dict[str, Any]) -> dict[str, float]:
        """The log's RTD entries from a step's sums (its generator MLM and SOP ones are the MLM run's keys)."""
        return {"rtd_loss": m["rtd_loss"] / max(m["rtd_tokens"], 1.0),
                "rtd_accuracy": m["rtd_correct"] / max(m["rtd_tokens"], 1.0),
                "replaced_share": m["replaced"] / max(m["n_masked"], 1.0)}

    def evaluate(self, model: nn.Module, heldout, ctx, max_examples: int, baselines: TokenBaselines
                 ) -> dict[str, float]:
        """Held-out scores: the generator's MLM ones under `evaluate`'s keys, the discriminator's
        sentence order, and rtd_loss, rtd_accuracy, rtd_replaced_accuracy (of the replaced tokens,
        how many it finds), baseline_rtd_accuracy (always "original") and replaced_share. The
        samplers are seeded by (rank, batch, row): every evaluation of a run draws alike."""
        calls = itertools.count()

        def forward(plain: nn.Module, batch: dict[str, torch.Tensor]):
            call = next(calls)  # stream 1: evaluation
            samplers = [sampler_for(self.seed, 1, ctx.rank, call, b) for b in range(len(batch["input_ids"]))]
            return plain(**batch, samplers=samplers)

        s = evaluate(model, heldout, ctx, max_examples=max_examples, baselines=baselines, forward=forward,
                     extra_sums=lambda out, batch: _rtd_sums(out))
        tokens, replaced = max(s.pop("rtd_tokens"), 1.0), s.pop("replaced")
        s.update(rtd_loss=s.pop("rtd_loss") / tokens, rtd_accuracy=s.pop("rtd_correct") / tokens,
                 rtd_replaced_accuracy=s.pop("replaced_found") / max(replaced, 1.0),
                 baseline_rtd_accuracy=1.0 - replaced / tokens, replaced_share=replaced / max(s["masked_tokens"], 1.0))
        return s

    def setup_record(self, model: nn.Module) -> dict[str, float]:
        """The setup log's entries: the generator's width and parameter count."""
        from albertlm.checkpoint import unwrap

        generator = unwrap(model).generator
        return {"generator_hidden_size": generator.config.hidden_size,
                "generator_parameters": sum(p.numel() for p in generator.parameters())}

    @staticmethod
    def save_model(model: ReplacedTokenDetection, path: Path, state_dict: dict | None) -> None:
        model.save_discriminator(path, state_dict)


def _rtd_sums(out: RTDOutput) -> dict[str, float]:
    """A batch's RTD sums: loss, correct and real tokens, replaced tokens, replaced ones detected."""
    guess = out.rtd_logits > 0
    real = out.real
    return {"rtd_loss": float(out.rtd_loss_sum.detach()), "rtd_correct": float(((guess == out.replaced) & real).sum()),
            "rtd_tokens": float(real.sum()), "replaced": float((out.replaced & real).sum()),
            "replaced_found": float((guess & out.replaced & real).sum())}
