"""How smooth the layer-to-layer transitions are (paper §4.4, Figure 1).

For every layer application l the input h_{l-1} and output h_l of each real (non-padding) token
are compared by
  - the L2 distance ||h_l - h_{l-1}||, and
  - the angle between them in degrees, arccos of their cosine similarity (the paper plots the
    cosine similarity "in degrees"),
each averaged over all held-out tokens (the mean of the per-token values). The input of the
first layer is the projected embedding (E→H), so an L-layer model gives L points per curve.
The paper finds ALBERT's transitions much smoother than BERT's (smaller distances and angles),
and oscillating rather than converging to 0 with depth: parameter sharing stabilises the network.

The angle is computed as 2·atan2(||â - b̂||, ||â + b̂||) on the unit vectors, which is exact near 0
(arccos of a rounded cosine is not: arccos(1 - 6e-8) is already 0.02 degrees).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch
from torch import nn

from albertlm.vocab import IGNORE_INDEX

UNTRAINED = ", untrained"
"""Suffix of the label of a reference curve measured on the same architecture at initialisation."""


def angle_degrees(a: torch.Tensor, b: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Angle between the vectors of the last dimension, in degrees.

    Args:
        a, b: [..., H], the same shape.
    Returns:
        [...]: in [0, 180]; 0 where the vectors point the same way (or either is zero).
    """
    a = a.double()
    b = b.double()
    ua = a / a.norm(dim=-1, keepdim=True).clamp_min(eps)
    ub = b / b.norm(dim=-1, keepdim=True).clamp_min(eps)
    return torch.rad2deg(2 * torch.atan2((ua - ub).norm(dim=-1), (ua + ub).norm(dim=-1)))


def transition_sums(hidden_states: Sequence[torch.Tensor],
                    attention_mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Per-layer sums over the real tokens of one batch.

    Args:
        hidden_states: n + 1 tensors [B, S, H]: a layer's input, then each layer's output
            (`AlbertModel(..., output_hidden_states=True).hidden_states`).
        attention_mask: [B, S], 1 for tokens and 0 for padding; None means no padding.
    Returns:
        {"distance": [n], "angle": [n], "cosine": [n]} float64 sums over tokens, and
        {"tokens": scalar} their count; divide to get the means (`smoothness` does).
    """
    B, S = hidden_states[0].shape[:2]
    keep = (torch.ones(B, S, dtype=torch.bool) if attention_mask is None
            else attention_mask.bool().cpu())  # [B, S]
    distance, angle, cosine = [], [], []
    for before, after in zip(hidden_states[:-1], hidden_states[1:]):
        x, y = before.detach().cpu()[keep].double(), after.detach().cpu()[keep].double()  # [T, H]
        distance.append((y - x).norm(dim=-1).sum())
        angle.append(angle_degrees(x, y).sum())
        cosine.append(torch.nn.functional.cosine_similarity(x, y, dim=-1, eps=1e-12).sum())
    return {"distance": torch.stack(distance), "angle": torch.stack(angle), "cosine": torch.stack(cosine),
            "tokens": keep.sum().double()}


@torch.no_grad()
def smoothness(model: nn.Module, batches: Iterable[dict[str, torch.Tensor]],
               device: str | torch.device = "cpu") -> dict[str, list[float] | int]:
    """Mean L2 distance, angle and cosine between every layer's input and output.

    Args:
        model: an AlbertModel, or a model holding one as `.albert` (AlbertForPreTraining, heads).
        batches: dicts with input_ids [B, S] and optionally attention_mask, token_type_ids.
        device: where to run the model.
    Returns:
        {"layers": n, "tokens": T, "distance": [n], "angle": [n] (degrees), "cosine": [n]}.
    """
    backbone = getattr(model, "albert", model)
    was_training = backbone.training
    backbone.eval().to(device)
    total: dict[str, torch.Tensor] | None = None
    for batch in batches:
        inputs = {k: batch[k].to(device) for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}
        states = backbone(**inputs, output_hidden_states=True).hidden_states
        sums = transition_sums(states, batch.get("attention_mask"))
        total = sums if total is None else {k: total[k] + v for k, v in sums.items()}
    backbone.train(was_training)
    if total is None:
        raise ValueError("smoothness needs at least one batch")
    n = max(float(total["tokens"]), 1.0)
    return {"layers": len(total["distance"]), "tokens": int(total["tokens"]),
            **{k: (total[k] / n).tolist() for k in ("distance", "angle", "cosine")}}


# ---------------------------------------------------------------------------- held-out inputs
def unmasked_heldout_batches(data_dir, batch_size: int = 32, max_examples: int | None = None,
                             seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """Held-out pairs of a built data directory, as the original (unmasked) token ids.

    The loader masks dynamically; the labels hold the original ids at the masked positions, so
    putting them back restores the text exactly.
    """
    from albertlm.data.loader import PretrainingDataset, collate

    dataset = PretrainingDataset(data_dir, "heldout", seed=seed, shuffle=False)
    n = min(dataset.num_examples, max_examples or dataset.num_examples)
    out = []
    for start in range(0, n, batch_size):
        batch = collate([dataset.example(i) for i in range(start, min(n, start + batch_size))],
                        special=dataset.special_ids)
        masked = batch["labels"] != IGNORE_INDEX
        batch["input_ids"] = torch.where(masked, batch["labels"], batch["input_ids"])
        out.append({k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")})
    return out


def reencode_batches(batches: Iterable[dict[str, torch.Tensor]], source, target, max_length: int = 128,
                     batch_size: int = 32) -> list[dict[str, torch.Tensor]]:
    """The same held-out pairs for a model with another vocabulary (an HF checkpoint).

    Segments A and B are decoded with `source` (our tokenizer) and encoded again with `target`
    (the checkpoint's), each cut to fit `max_length`.
    """
    from albertlm.data.loader import collate

    pairs = []
    for batch in batches:
        for ids, types, mask in zip(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]):
            real = mask.bool()
            ids, types = ids[real].numpy(), types[real].numpy()
            a, b = ids[1:][types[1:] == 0][:-1], ids[types == 1][:-1]  # drop [CLS] and the [SEP]s
            pairs.append((source.decode(a), source.decode(b)))
    encoded_a = target.encode_batch([a for a, _ in pairs])
    encoded_b = target.encode_batch([b for _, b in pairs])
    half = (max_length - 3) // 2
    examples = []
    for ea, eb in zip(encoded_a, encoded_b):
        ids, types = target.build_inputs(ea[:half], eb[:max_length - 3 - min(len(ea), half)])
        ids = ids.astype(np.int64)
        examples.append({"input_ids": ids, "token_type_ids": types.astype(np.int64),
                         "attention_mask": np.ones(len(ids), dtype=np.int64),
                         "labels": np.full(len(ids), IGNORE_INDEX, dtype=np.int64), "sentence_order_label": 0})
    return [{k: v for k, v in collate(examples[i:i + batch_size], special=target.special_ids).items()
             if k in ("input_ids", "attention_mask", "token_type_ids")}
            for i in range(0, len(examples), batch_size)]


# ---------------------------------------------------------------------------- the figure
def plot_smoothness(curves: dict[str, dict], path, title: str = "") -> None:
    """Figure 1's two panels: L2 distance and angle (degrees) per layer, one line per model.

    Args:
        curves: {label: a `smoothness` result}.
        path: the PNG to write.
        title: a line above both panels.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from albertlm.analysis.figures import save_png

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    colors: dict[str, str] = {}
    for label, result in curves.items():
        layers = np.arange(1, result["layers"] + 1)
        base, _, _ = label.partition(UNTRAINED)  # an untrained reference: the trained curve's colour, dashed
        color = colors.setdefault(base, f"C{len(colors)}")
        style = {"color": color, "marker": "o", "label": label,
                 **({"ls": "--", "alpha": 0.6, "ms": 3} if UNTRAINED in label else {})}
        axes[0].plot(layers, result["distance"], **style)
        axes[1].plot(layers, result["angle"], **style)
    for ax, ylabel in zip(axes, ("L2 distance (input vs output)", "angle (degrees) = arccos(cosine)")):
        ax.set_xlabel("layer")
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_png(fig, path)
