"""Running a head over features: batches of similar length (`data.bucketing.sorted_batches`), outputs back
in feature order.

The model may be any module with the head's call signature: a torch head (fp32, int8 or prepacked),
the patience runner of early exit (`inference.exit.PatienceExit`) or an exported file run by
onnxruntime (`inference.onnx_backend.OnnxModel`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from albertlm.data.bucketing import restore_order, sorted_batches
from albertlm.errors import AlbertlmError
from albertlm.tasks.common import Feature, pad_batch
from albertlm.tasks.registry import TaskSpec


def to_device(arrays: dict[str, np.ndarray], device: torch.device) -> dict[str, torch.Tensor]:
    """Padded numpy inputs (`pad_batch`) as torch tensors on `device`."""
    return {k: torch.from_numpy(np.ascontiguousarray(v)).to(device) for k, v in arrays.items()}


@torch.no_grad()
def run_features(model: nn.Module, spec: TaskSpec, features: list[Feature], batch_size: int,
                 device: torch.device, per_feature: tuple[str, ...] = ()) -> dict[str, list[np.ndarray]]:
    """The head's outputs for every feature, in feature order.

    Args:
        per_feature: further output fields with one value per feature, kept whole (e.g. the
            `exit_layers` of early exit).
    Returns:
        {output name: one float32 array per feature} ([num_labels], [C], or [S_feature, ...] for
        per-position outputs, trimmed to the feature's own length); `per_feature` fields as they come.
    """
    was_training = model.training
    model.eval()
    batches = sorted_batches([len(f) for f in features], batch_size)  # similar lengths share a batch
    rows: dict[str, list] = {name: [] for name in (*spec.family.outputs, *per_feature)}
    for idx in batches:
        batch = pad_batch([features[i] for i in idx])
        batch = {n: v for n, v in batch.items() if n in ("input_ids", "attention_mask", "token_type_ids")}
        result = model(**to_device(batch, device))
        for name in spec.family.outputs:
            values = getattr(result, name).float().cpu().numpy()
            rows[name].append([row[:len(features[i])] if spec.family.per_position else row
                               for row, i in zip(values, idx)])
        for name in per_feature:
            rows[name].append(list(getattr(result, name).cpu().numpy()))
    model.train(was_training)
    return {name: restore_order(batches, per_batch) for name, per_batch in rows.items()}


def check_finite_outputs(outputs: dict[str, list[np.ndarray]], spec: TaskSpec, where: str) -> None:
    """Refuse head outputs that hold NaN or infinity: no score, prediction or cached teacher logit is made
    of them (finite weights can still overflow float32; argmax would read NaN as class 0).

    Raises:
        AlbertlmError: naming `where` (the model directory, `--teacher DIR`), the output and how many
            inputs it failed on.
    """
    for name in spec.family.outputs:
        bad = sum(1 for row in outputs[name] if not np.isfinite(row).all())
        if bad:
            raise AlbertlmError(f"{where}: its {name} are NaN or infinite for {bad} of {len(outputs[name])} inputs "
                                "(finite weights whose values overflow float32?); refusing to use them")
