"""How good a directory's sentence vectors are on a task's sentence pairs: `albertlm embed DIR --evaluate TASK`.

Both texts of every pair are embedded (inference/embed.py: the directory's pooling, or the flags'),
the vectors L2-normalised, and scored by the pairs' kind (tasks/pairs.py): STS-B Spearman and Pearson of
the cosines, pair accuracy at the best cosine threshold (MRPC, LCQMC, AFQMC, QNLI ...), and retrieval of
each alike pair's second text among all the split's second texts (recall@1, recall@10, MRR). The
tf-idf cosine baseline of the same metrics is `albertlm.tasks.baselines.embedding_baseline`.
Fine-tuning with an embedding objective (train/embedding.py) scores its dev split with `embedding_metrics`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from albertlm.errors import AlbertlmError
from albertlm.inference.embed import EmbedSettings, Embedder, load_embedder
from albertlm.tasks.pairs import NOT_FRACTIONS, Pairs, pair_metrics, pairs_of, unit_rows
from albertlm.utils import atomic_write_text


def embedding_metrics(embedder: Embedder, pairs: Pairs, batch_size: int = 32, progress: bool = False
                      ) -> dict[str, float]:
    """The pairs' metrics (tasks/pairs.py `pair_metrics`) of the embedder's normalised vectors.

    Args:
        embedder: a loaded Embedder (its model in eval mode).
        pairs: the pairs to score.
        batch_size, progress: as Embedder.encode.
    Returns:
        {metric: value}.
    """
    a = unit_rows(embedder.encode(pairs.text_a, batch_size, progress))  # [N, H]
    b = unit_rows(embedder.encode(pairs.text_b, batch_size, progress))  # [N, H]
    return pair_metrics(pairs, a, b)


def evaluate_embeddings(model_dir: str | Path, task, data_dir: str | Path, split: str = "dev",
                        settings: EmbedSettings = EmbedSettings(), max_examples: int | None = None) -> dict[str, Any]:
    """Score a directory's sentence vectors on one split of a pair task.

    Args:
        model_dir: any directory `albertlm embed` reads.
        task: a task name or TaskSpec with sentence pairs (sts-b, mrpc, qnli, lcqmc, afqmc, ...).
        data_dir: the task's data directory (or the split's file).
        split: dev, test or train.
        settings: pooling, normalisation (no effect: cosines), length, batch size, device.
        max_examples: score only the first N pairs.
    Returns:
        {"task", "split", "pairs", "kind", "main_metric", "metrics", "model_dir", "pooling", "max_seq_length"}.
    Raises:
        AlbertlmError: one line: a task without pairs, a missing split, a directory embed refuses.
    """
    from albertlm.tasks.registry import get_task

    spec = get_task(task) if isinstance(task, str) else task
    examples = spec.read(data_dir, split)
    examples = examples[:max_examples] if max_examples else examples
    pairs = pairs_of(spec, examples, f"{data_dir} ({split})")  # refused before the model loads
    embedder = load_embedder(model_dir, settings)
    scores = embedding_metrics(embedder, pairs, settings.batch_size, settings.progress)
    return {"task": spec.name, "split": split, "pairs": len(pairs), "kind": pairs.kind,
            "main_metric": pairs.main_metric, "metrics": scores, "model_dir": str(model_dir),
            "pooling": embedder.pooling, "max_seq_length": embedder.max_seq_length}


def format_table(result: dict[str, Any]) -> str:
    """The result as a text table: each metric x100 (the threshold, a cosine, and the counts as they are),
    the main one starred."""
    lines = [f"{result['task']} {result['split']}: {result['pairs']:,} pairs ({result['kind']}), "
             f"{result['pooling']} pooling"]
    for name, value in result["metrics"].items():
        mark = " *" if name == result["main_metric"] else ""
        if name in ("queries", "candidates"):
            shown = f"{value:>10.0f}"
        else:
            shown = f"{value:>10.4f}" if name in NOT_FRACTIONS else f"{100 * value:>10.2f}"
        lines.append(f"  {name + mark:<16}{shown}")
    return "\n".join(lines)


def write_report(result: dict[str, Any], path: str | Path) -> None:
    """Write the result as JSON, atomically (a failed write leaves the earlier file)."""
    if Path(path).suffix.lower() != ".json":
        raise AlbertlmError(f"{path}: the metrics report must end in .json")
    atomic_write_text(path, json.dumps(result, indent=2) + "\n")
