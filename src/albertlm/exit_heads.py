"""Exit heads for patience-based early exit (PABEE: Zhou et al. 2020, "BERT Loses Patience").

ALBERT's sharing cuts parameters, not compute: every example still runs all L layer applications.
Early exit lets easy examples stop sooner. Training puts a classifier after every layer
application, each on the same pooler (sequence classification: tanh(Linear(h_i[CLS]))) or on
every position (token classification); the last one is the head's ordinary `classifier`.
Loss = sum_i (i+1) L_i / sum_i (i+1), so deeper classifiers, which see more, weigh more. The
patience runtime that stops each example early lives in `albertlm.inference.exit`.

A fine-tuned directory keeps the final classifier and the pooler where transformers expects them
(model.safetensors), so it still loads in transformers' AlbertForSequenceClassification /
AlbertForTokenClassification; the other L - 1 classifiers live beside it in exit_heads.safetensors,
announced by config.json's `albertlm_early_exit` entry. Only albertlm reads them.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from albertlm.config import AlbertConfig
from albertlm.errors import AlbertlmError
from albertlm.heads import (AlbertForSequenceClassification, AlbertForTokenClassification, has_pooler,
                            resolve_problem_type, sequence_loss, token_loss)

EXIT_HEADS_NAME = "exit_heads.safetensors"
"""The file beside model.safetensors holding the classifiers of every layer but the last."""
CONFIG_KEY = "albertlm_early_exit"
"""config.json entry announcing the exit heads: {"file": EXIT_HEADS_NAME, "heads": L - 1}."""


def depth_weighted_loss(losses: Sequence[torch.Tensor]) -> torch.Tensor:
    """sum_i (i+1) L_i / sum_i (i+1) over the per-layer losses L_0 .. L_{n-1} (PABEE's training loss).

    Args:
        losses: one scalar per layer application, shallowest first.
    Returns:
        The weighted mean, a scalar.
    """
    if not losses:
        raise AlbertlmError("depth_weighted_loss: no layer losses")
    total = sum((i + 1) * loss for i, loss in enumerate(losses))
    return total / (len(losses) * (len(losses) + 1) / 2)


def with_exit_heads(config: AlbertConfig, enabled: bool = True) -> AlbertConfig:
    """`config` announcing exit heads after every layer application (config.json's CONFIG_KEY), or,
    with `enabled` False, announcing none."""
    extra = {k: v for k, v in config.extra.items() if k != CONFIG_KEY}
    if enabled:
        extra[CONFIG_KEY] = {"file": EXIT_HEADS_NAME, "heads": config.num_layer_calls - 1}
    return config.replace(extra=extra)


def has_exit_heads(config: AlbertConfig) -> bool:
    """Whether a config (a fine-tuned directory's config.json) announces exit heads."""
    return CONFIG_KEY in config.extra


@dataclass
class EarlyExitOutput:
    loss: torch.Tensor | None = None
    """Depth-weighted loss over every layer's classifier, when labels were given."""
    logits: torch.Tensor | None = None
    """The last layer's logits, [B, num_labels] or [B, S, num_labels]: the plain head's output."""
    layer_logits: torch.Tensor | None = None
    """Every layer application's logits, [L, B, num_labels] or [L, B, S, num_labels]."""
    hidden_states: tuple[torch.Tensor, ...] | None = None
    """As AlbertModelOutput.hidden_states, when asked."""


class ExitHeads:
    """What the two early-exit heads share: the extra classifiers, the forward over all layers, the
    depth-weighted loss and the side file. Mixed in before the plain head class, whose `classifier`
    is the last layer's, so the key table and transformers see the plain head."""

    config: AlbertConfig
    classifier: nn.Linear
    exits: nn.ModuleList

    def add_exit_heads(self) -> None:
        """One Linear(H→num_labels) per layer application but the last, initialised like the classifier."""
        config = with_exit_heads(self.config)
        self.config = config
        self.exits = nn.ModuleList(nn.Linear(config.hidden_size, config.num_labels)
                                   for _ in range(config.num_layer_calls - 1))
        for head in self.exits:
            nn.init.normal_(head.weight, mean=0.0, std=config.initializer_range)
            nn.init.zeros_(head.bias)

    def exit_head(self, i: int) -> nn.Linear:
        """The classifier after layer application i (the plain `classifier` after the last)."""
        return self.exits[i] if i < len(self.exits) else self.classifier

    def exit_logits(self, i: int, h: torch.Tensor) -> torch.Tensor:
        """Layer application i's output h [B, S, H] -> its classifier's logits."""
        raise NotImplementedError

    def layer_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """One layer's loss, as the plain head computes it."""
        raise NotImplementedError

    per_position: bool
    """Logits have a sequence axis (token classification)."""

    def same_prediction(self, prev: torch.Tensor, logits: torch.Tensor, valid: torch.Tensor,
                        threshold: float) -> torch.Tensor:
        """Whether two consecutive layers predict the same, per row: bool [b]."""
        raise NotImplementedError

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, output_hidden_states: bool = False,
                unpad: bool = False) -> EarlyExitOutput:
        """Run every layer and every classifier (training, and full-depth scoring).

        Args:
            input_ids, attention_mask, token_type_ids, position_ids, labels: as the plain head's forward.
            output_hidden_states: also return every layer's hidden state.
            unpad: run the encoder on the real tokens only, as the plain head's forward.
        Returns:
            EarlyExitOutput: `logits` are the plain head's (the last layer's), `loss` the depth-weighted one.
        """
        out = self.albert(input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states=True,
                          unpad=unpad)
        layer_logits = [self.exit_logits(i, h) for i, h in enumerate(out.hidden_states[1:])]
        loss = None
        if labels is not None:
            loss = depth_weighted_loss([self.layer_loss(logits, labels) for logits in layer_logits])
        return EarlyExitOutput(loss=loss, logits=layer_logits[-1], layer_logits=torch.stack(layer_logits),
                               hidden_states=out.hidden_states if output_hidden_states else None)

    # ------------------------------------------------------------------ the side file
    def save_pretrained(self, path: str | Path, state_dict: dict[str, torch.Tensor] | None = None) -> None:
        """The plain head's directory (config.json + model.safetensors, loadable by transformers) plus
        exit_heads.safetensors with the other layers' classifiers."""
        from safetensors.torch import save_file

        from albertlm.utils import atomic_path

        state = dict(self.state_dict() if state_dict is None else state_dict)
        exits = {k: state.pop(k).detach().cpu().contiguous() for k in list(state) if k.startswith("exits.")}
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        with atomic_path(path / EXIT_HEADS_NAME) as tmp:
            save_file(exits, str(tmp), metadata={"format": "pt"})
        super().save_pretrained(path, state_dict=state)

    @classmethod
    def from_pretrained(cls, path: str | Path, **kwargs):
        """The plain head's weights from `path`, then exit_heads.safetensors when the directory has it
        (a pretrained directory has none: the exit heads then start random, with a warning)."""
        model = super().from_pretrained(path, **kwargs)
        file = Path(path) / EXIT_HEADS_NAME
        if file.is_file():
            load_exit_heads(model, file)
        else:
            warnings.warn(f"{path}: no {EXIT_HEADS_NAME}; the exit heads are left randomly initialised, "
                          "train before trusting their outputs", stacklevel=2)
        return model


def load_exit_heads(model: ExitHeads, file: str | Path) -> None:
    """Load exit_heads.safetensors into `model`, every key, shape and dtype checked against its config
    and every value finite (`load_safetensors`)."""
    from albertlm.interop.hf import load_safetensors  # interop sits above the heads, as for from_pretrained

    tensors = load_safetensors(file)
    expected = {k: v.shape for k, v in model.exits.state_dict().items()}
    expected = {f"exits.{k}": shape for k, shape in expected.items()}
    missing, unexpected = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
    if missing or unexpected:
        what = f"missing {missing[0]}" if missing else f"unexpected {unexpected[0]}"
        raise AlbertlmError(f"{file}: {what}; the config implies {len(model.exits)} exit heads "
                            f"of [{model.config.num_labels}, {model.config.hidden_size}]")
    for name, tensor in tensors.items():
        if tensor.shape != expected[name]:
            raise AlbertlmError(f"{file}: {name} has shape {list(tensor.shape)}, the config implies "
                                f"{list(expected[name])}")
        if not tensor.is_floating_point():
            raise AlbertlmError(f"{file}: {name} has dtype {str(tensor.dtype).removeprefix('torch.')}; "
                                "a weight must be floating point")
    model.exits.load_state_dict({k[len("exits."):]: v for k, v in tensors.items()})


# ---------------------------------------------------------------------------- the two heads
class EarlyExitSequenceClassifier(ExitHeads, AlbertForSequenceClassification):
    """AlbertForSequenceClassification with a classifier on the shared pooler after every layer."""

    per_position = False

    def __init__(self, config: AlbertConfig):
        if not has_pooler(config):  # exit_logits pool [CLS]; a layer's mean would need the mask
            raise AlbertlmError(f"exit heads classify the pooler's [CLS] vector; classifier_pooling="
                                f"{config.classifier_pooling!r} has no pooler")
        super().__init__(config)
        self.add_exit_heads()

    def exit_logits(self, i: int, h: torch.Tensor) -> torch.Tensor:
        """h [B, S, H] -> [B, num_labels]: the shared pooler on h[:, 0], then layer i's classifier."""
        return self.exit_head(i)(self.dropout(self.albert.pool(h)))

    def layer_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return sequence_loss(self.config, logits, labels)

    def same_prediction(self, prev: torch.Tensor, logits: torch.Tensor, valid: torch.Tensor,
                        threshold: float) -> torch.Tensor:
        """Two layers' logits [b, C] -> bool [b]: the same class (single-label), the same set of labels
        (multi-label: logit > 0), or outputs within `threshold` (regression)."""
        kind = resolve_problem_type(self.config)
        if kind == "regression":
            return (logits - prev).abs().amax(-1) < threshold
        if kind == "multi_label_classification":
            return ((logits > 0) == (prev > 0)).all(-1)
        return logits.argmax(-1) == prev.argmax(-1)


class EarlyExitTokenClassifier(ExitHeads, AlbertForTokenClassification):
    """AlbertForTokenClassification with a token classifier after every layer."""

    per_position = True

    def __init__(self, config: AlbertConfig):
        super().__init__(config)
        self.add_exit_heads()

    def exit_logits(self, i: int, h: torch.Tensor) -> torch.Tensor:
        """h [B, S, H] -> [B, S, num_labels]."""
        return self.exit_head(i)(self.dropout(h))

    def layer_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return token_loss(self.config, logits, labels)

    def same_prediction(self, prev: torch.Tensor, logits: torch.Tensor, valid: torch.Tensor,
                        threshold: float) -> torch.Tensor:
        """Two layers' logits [b, S, C] -> bool [b]: no real token (valid [b, S]) changed its argmax."""
        return ((logits.argmax(-1) == prev.argmax(-1)) | ~valid).all(-1)


EXIT_HEADS: dict[str, type[nn.Module]] = {
    "AlbertForSequenceClassification": EarlyExitSequenceClassifier,
    "AlbertForTokenClassification": EarlyExitTokenClassifier,
}
"""Plain head class name -> its early-exit class."""
