"""The score map of graded pairs, fitted after the fact: what it gives saved embedders, and the tf-idf cosine.

`albertlm finetune --objective cosent` (and the no-`--model` default on graded pairs) ends by fitting a
monotone cosine -> score map on the training pairs (src/albertlm/tasks/score_map.py). This script fits
the same map, with the same functions, on embedders saved before that stage existed (or with other
objectives), and on the count-based baseline's cosine, so the gain of the map is read against the gain
the same map gives the baseline. For each directory: its dev Spearman and Pearson from the raw cosines
and from the mapped ones; nothing is written into the directories.

    python -m benchmarks.score_map --data DATA/STS-B runs/stsb-embedder runs/other-embedder --report map.json

Each directory is embedded with its own pooling and, where its recipe.json records one, the
max_seq_length it was trained with (else --max-seq-length). Output: a markdown table and the results
envelope (benchmarks/harness.py) on stdout, and in --report when given.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from albertlm.errors import AlbertlmError
from albertlm.inference.embed_eval import pair_cosines
from albertlm.tasks.pairs import Pairs, graded_scores, pairs_of
from albertlm.tasks.registry import get_task
from albertlm.tasks.score_map import fit_score_map
from benchmarks.harness import envelope, markdown_table, publish


def mapped_scores(train: Pairs, train_cos: np.ndarray, dev: Pairs, dev_cos: np.ndarray) -> dict:
    """Raw and mapped dev scores of one cosine (the map fitted on the training cosines only)."""
    fitted = fit_score_map(train_cos, train.scores)
    row = {"raw": graded_scores(dev_cos, dev.scores), "knots": None if fitted is None else len(fitted.cosine)}
    row["mapped"] = None if fitted is None else graded_scores(fitted(dev_cos), dev.scores)
    return row


def embedder_row(model_dir: str, train: Pairs, dev: Pairs, max_seq_length: int, batch_size: int) -> dict:
    """One saved embedder's row."""
    from albertlm.inference.embed import EmbedSettings, load_embedder

    recipe = Path(model_dir) / "recipe.json"
    try:
        length = json.loads(recipe.read_text(encoding="utf-8")).get("max_seq_length") or max_seq_length
    except (OSError, ValueError, AttributeError):
        length = max_seq_length
    embedder = load_embedder(model_dir, EmbedSettings(max_seq_length=int(length), batch_size=batch_size,
                                                      device="cpu", progress=False))

    def cosines(pairs: Pairs) -> np.ndarray:
        return np.asarray(pair_cosines(embedder, list(zip(pairs.text_a, pairs.text_b)), batch_size))

    return {"model": model_dir, "max_seq_length": int(length),
            **mapped_scores(train, cosines(train), dev, cosines(dev))}


def tfidf_row(spec, train_examples: list, train: Pairs, dev: Pairs) -> dict:
    """The tf-idf cosine baseline's row (its vectorizer fitted on the training text, as the command's)."""
    from albertlm.tasks.baselines import _cosines, example_texts, is_chinese, ngrams, require_sklearn, tfidf_vectorizer

    require_sklearn()
    chinese = is_chinese(train_examples)
    vectorizer = tfidf_vectorizer(list(example_texts(train_examples)), chinese)

    def cosines(pairs: Pairs) -> np.ndarray:
        return _cosines(vectorizer, [ngrams(t, chinese) for t in pairs.text_a],
                        [ngrams(t, chinese) for t in pairs.text_b])

    return {"model": "tfidf_cosine", **mapped_scores(train, cosines(train), dev, cosines(dev))}


def render(result: dict) -> str:
    """The rows as a markdown table: raw and mapped dev Spearman / Pearson (x100), the knots."""
    def cell(scores):
        return "-" if scores is None else f"{100 * scores['spearman']:.2f} / {100 * scores['pearson']:.2f}"

    rows = [(r["model"], cell(r["raw"]), cell(r["mapped"]), r["knots"] or "-") for r in result["results"]["rows"]]
    return "\n".join(markdown_table(("model", "raw Spearman / Pearson", "mapped Spearman / Pearson", "knots"), rows))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="+", metavar="DIR", help="sentence embedders (albertlm embed reads them)")
    p.add_argument("--data", required=True, help="the task's data directory (train and dev files)")
    p.add_argument("--task", default="sts-b", help="a task of graded pairs (default: sts-b)")
    p.add_argument("--max-seq-length", type=int, default=64, help="tokens per text where a directory's recipe.json "
                   "records none (default: 64)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--report", default=None, help="also write the JSON report here")
    args = p.parse_args(argv)
    start = time.perf_counter()
    try:
        spec = get_task(args.task)
        train_examples = spec.read(args.data, "train")
        train = pairs_of(spec, train_examples, f"{args.data} (train)")
        dev = pairs_of(spec, spec.read(args.data, "dev"), f"{args.data} (dev)")
        if train.kind != "graded" or dev.kind != "graded":
            raise AlbertlmError(f"--task {spec.name}: its pairs are {train.kind}; a score map needs graded pairs")
        rows = [tfidf_row(spec, train_examples, train, dev)]
        rows += [embedder_row(m, train, dev, args.max_seq_length, args.batch_size) for m in args.models]
    except AlbertlmError as exc:
        p.error(str(exc))
    argv = sys.argv[1:] if argv is None else list(argv)
    shown_argv = [f"DATA/{Path(args.data).name}" if a == args.data else a for a in argv]  # where the user keeps it
    results = {"task": spec.name, "train_pairs": len(train), "dev_pairs": len(dev), "rows": rows}
    publish(envelope("benchmarks.score_map", shown_argv, results, started=start), args.report, render)
    return 0


if __name__ == "__main__":
    sys.exit(main())
