"""How good a directory's sentence vectors are on a task's sentence pairs: `albertlm embed DIR --evaluate TASK`.

Both texts of every pair are embedded (inference/embed.py: the directory's pooling, or the flags'),
the vectors L2-normalised, and scored by the pairs' kind (tasks/pairs.py): STS-B Spearman and Pearson of
the cosines, pair accuracy at the best cosine threshold (MRPC, LCQMC, AFQMC, QNLI ...), and retrieval of
each alike pair's second text among all the split's second texts (recall@1, recall@10, MRR). The
tf-idf cosine baseline of the same metrics is `albertlm.tasks.baselines.embedding_baseline`.
Fine-tuning with an embedding objective (train/embedding.py) scores its dev split with `embedding_metrics`.
Such a directory records its task in config.json (`embedding_record`), so `albertlm evaluate` scores it
here, and `albertlm predict` prints the cosine of each text pair (`pair_cosine_lines`). An embedder trained
on graded pairs also keeps a cosine -> score map fitted on its training pairs (tasks/score_map.py): on
graded pairs evaluate scores the mapped cosines too ("score_map"), and predict prints the mapped score.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from albertlm.errors import AlbertlmError
from albertlm.inference.embed import EmbedSettings, Embedder, load_embedder
from albertlm.pooling import EMBEDDING_KEY
from albertlm.tasks.pairs import NOT_FRACTIONS, Pairs, graded_scores, pair_metrics, pairs_of, row_cosines, unit_rows
from albertlm.tasks.score_map import SCORE_MAP_KEY, ScoreMap
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
    score_map = saved_score_map(model_dir) if pairs.kind == "graded" else None
    embedder = load_embedder(model_dir, settings)
    a = unit_rows(embedder.encode(pairs.text_a, settings.batch_size, settings.progress))
    b = unit_rows(embedder.encode(pairs.text_b, settings.batch_size, settings.progress))
    result = {"task": spec.name, "split": split, "pairs": len(pairs), "kind": pairs.kind,
              "main_metric": pairs.main_metric, "metrics": pair_metrics(pairs, a, b), "model_dir": str(model_dir),
              "pooling": embedder.pooling, "max_seq_length": embedder.max_seq_length}
    if score_map is not None:
        result["score_map"] = graded_scores(score_map(row_cosines(a, b)), pairs.scores)
    return result


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
    for name, value in result.get("score_map", {}).items():
        lines.append(f"  {name + ' (mapped)':<16}{100 * value:>10.2f}")
    return "\n".join(lines)


def write_report(result: dict[str, Any], path: str | Path) -> None:
    """Write the result as JSON, atomically (a failed write leaves the earlier file)."""
    if Path(path).suffix.lower() != ".json":
        raise AlbertlmError(f"{path}: the metrics report must end in .json")
    atomic_write_text(path, json.dumps(result, indent=2) + "\n")


def embedding_record(model_dir: str | Path) -> dict[str, Any] | None:
    """The record a sentence embedder trained here keeps in its config.json (`EMBEDDING_KEY`: pooling,
    objective, task), or None: no record, or no readable config.json (the loader used next says why)."""
    try:
        record = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8")).get(EMBEDDING_KEY)
    except (OSError, ValueError, AttributeError):
        return None
    return record if isinstance(record, dict) else None


PAIR_LINE_HINT = "for one text's vector: albertlm embed DIR --input FILE"
"""What a one-text line is told to use instead, on the command line."""


def saved_score_map(model_dir: str | Path) -> ScoreMap | None:
    """The cosine -> score map an embedder trained on graded pairs keeps (tasks/score_map.py), or None.

    Raises:
        AlbertlmError: one line naming config.json: a malformed map.
    """
    record = embedding_record(model_dir)
    if record is None or SCORE_MAP_KEY not in record:
        return None
    return ScoreMap.from_record(record[SCORE_MAP_KEY], f"{Path(model_dir) / 'config.json'}: {EMBEDDING_KEY}")


def split_pair(line: str, where: str, model_dir: str | Path, hint: str = PAIR_LINE_HINT) -> tuple[str, str]:
    """(text_a, text_b) of a `text_a<TAB>text_b` line given to a sentence embedder.

    Raises:
        AlbertlmError: one line naming `where` (a file's line, a request's input): not two tab-separated texts.
    """
    if line.count("\t") != 1:
        raise AlbertlmError(f"{where}: {model_dir} is a sentence embedder; it scores text pairs, one "
                            f"text_a<TAB>text_b per line ({hint})")
    a, b = line.split("\t")
    return a, b


def pair_cosines(embedder: Embedder, pairs: list[tuple[str, str]], batch_size: int = 32) -> list[float]:
    """The cosine of the two texts' vectors of each pair, the score a sentence embedder gives it."""
    if not pairs:
        return []
    a = unit_rows(embedder.encode([p[0] for p in pairs], batch_size))
    b = unit_rows(embedder.encode([p[1] for p in pairs], batch_size))
    return [float(c) for c in row_cosines(a, b)]


def pair_cosine_lines(model_dir: str | Path, lines: list[str], settings: EmbedSettings = EmbedSettings(),
                      source: str = "input") -> list[str]:
    """What `albertlm predict` prints for a sentence embedder: the cosine of the two texts' vectors of each
    `text_a<TAB>text_b` line, as %.4f (`pair_cosines`), and where the embedder keeps a score map (trained on
    graded pairs) a tab and the score it maps the cosine to; a blank line gives a blank line (outputs stay
    aligned).

    Raises:
        AlbertlmError: one line, before the model loads: a line that is not two tab-separated texts.
    """
    all_lines = [line.rstrip("\r\n") for line in lines]
    keep = [i for i, line in enumerate(all_lines) if line.strip()]
    pairs = [split_pair(all_lines[i], f"{source} line {i + 1}", model_dir) for i in keep]
    out = [""] * len(all_lines)
    if keep:
        score_map = saved_score_map(model_dir)
        cosines = pair_cosines(load_embedder(model_dir, settings), pairs, settings.batch_size)
        scores = score_map(cosines) if score_map is not None else None
        for k, (i, cosine) in enumerate(zip(keep, cosines)):
            out[i] = f"{cosine:.4f}" if scores is None else f"{cosine:.4f}\t{scores[k]:.4f}"
    return out
