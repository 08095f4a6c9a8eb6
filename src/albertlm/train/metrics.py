"""Metric sinks: JSON lines and TensorBoard event files, written by the main rank only."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any


class MetricsLogger:
    """Appends one JSON object per record to `metrics.jsonl` and mirrors scalars to TensorBoard.

    Args:
        run_dir: the run directory (files go to run_dir/metrics.jsonl and run_dir/tensorboard/).
        enabled: False on non-main ranks (then every call is a no-op).
        tensorboard: also write TensorBoard event files.
    """

    def __init__(self, run_dir: str | os.PathLike, enabled: bool = True, tensorboard: bool = True):
        self.enabled = enabled
        self.path = Path(run_dir) / "metrics.jsonl"
        self._tb = None
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "a", encoding="utf-8")
            if tensorboard:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"))

    def log(self, step: int, split: str, values: dict[str, Any]) -> None:
        """Record `values` (numbers) for `split` ("train", "eval", ...) at `step`."""
        if not self.enabled:
            return
        clean = {k: (float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v)
                 for k, v in values.items()}
        self._fh.write(json.dumps({"step": step, "split": split, **clean}, sort_keys=True,
                                  allow_nan=True) + "\n")
        self._fh.flush()
        if self._tb is not None:
            for k, v in clean.items():
                if isinstance(v, float) and math.isfinite(v):
                    self._tb.add_scalar(f"{split}/{k}", v, step)

    def close(self) -> None:
        if self.enabled:
            self._fh.close()
            if self._tb is not None:
                self._tb.close()


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """All records of a metrics.jsonl (a torn last line from a kill is ignored)."""
    records = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records
