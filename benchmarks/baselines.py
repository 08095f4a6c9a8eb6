"""Count-based baselines beside every result: what scikit-learn fitted in seconds on the same
training split scores on the same dev split, for every task folder under a data root.

The baselines themselves (which ones, their fixed hyperparameters, the units of text) live in the
package, `albertlm.tasks.baselines`, whose docstring describes them; `albertlm finetune` without
--model shows the strongest of them beside its own dev score. This script runs them over many task
folders and writes one JSON report (or a markdown table). Every number is x100, the task's own
metric on its own reader's examples, as `albertlm evaluate` prints it. Tasks without a training
split here (QNLI, LCQMC) are skipped with a note.

    python -m benchmarks.baselines --data DATA --out benchmarks/results/baselines.json
    python -m benchmarks.baselines --data DATA --tasks sst-2 conll2003 --markdown
    python -m benchmarks.baselines --data DATA --embedding --markdown

With --embedding it runs instead the tf-idf cosine baseline of the sentence-embedding metrics
(`albertlm.tasks.baselines.embedding_baseline`: STS-B Spearman and Pearson, pair accuracy at the best
cosine threshold, retrieval recall@1/@10 and MRR) on every pair task whose folder exists, its
vectorizer fitted on the training text (on the test split's text where a folder has no training
split, as LCQMC here), scored on dev.

DATA is wherever the public task data lives, one folder per task in its usual layout. The report
writes it as `DATA` (the command, the data root, every message), so a results file names no folder
outside the repository.

Output: the results envelope (benchmarks/harness.py: date, command, machine) on stdout (or, with
--markdown, a table), and in --out when given; its results hold per task the split sizes, the main
metric and each baseline's score and fit time (featurizing the training split included; wall seconds
on a possibly shared machine).

Needs scikit-learn, an optional extra: `pip install 'albertlm[bench]'`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from albertlm.errors import AlbertlmError
from albertlm.tasks.baselines import (BASELINES, COUNTS, SPLIT, baseline_scores, embedding_baseline_scores,
                                      require_sklearn)
from albertlm.tasks.pairs import NOT_FRACTIONS
from albertlm.tasks.registry import get_task
from benchmarks.harness import envelope, publish

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
# registry name -> the task's usual folder under the data root (shared/data/README.md)
FOLDERS = {"sst-2": "SST-2", "cola": "CoLA", "mrpc": "MRPC", "rte": "RTE", "sts-b": "STS-B", "qnli": "QNLI",
           "chnsenticorp": "ChnSentiCorp", "afqmc": "AFQMC", "lcqmc": "LCQMC", "tnews": "TNEWS",
           "conll2003": "CoNLL-2003", "msra-ner": "MSRA-NER", "cluener": "CLUENER2020", "weibo-ner": "Weibo-NER"}


# ---------------------------------------------------------------------------- the report
def markdown(env: dict) -> str:
    """A result (an envelope) as a markdown table, one row per task and baseline, then the skipped tasks."""
    result = env["results"]
    lines = ["| task | train / dev | metric | baseline | dev score | also | fit s |", "|---|---|---|---|---|---|---|"]
    for t in result["tasks"]:
        for name, b in t["baselines"].items():
            score = "— (constant)" if b["value"] is None else f"{b['value']:.2f}"
            also = ", ".join(f"{k} {v:.2f}" for k, v in b["metrics"].items()
                             if k != t["metric"] and k not in COUNTS and not k.startswith("f1_"))
            lines.append(f"| {t['task']} | {t['train_examples']:,} / {t['dev_examples']:,} | {t['metric']} | "
                         f"{name} | {score} | {also} | {b['fit_s']:.2f} |")
    if result["skipped"]:
        lines.append("")
    lines += [f"- skipped {s['task']}: {s['reason']}" for s in result["skipped"]]
    return "\n".join(lines)


EMBEDDING_TASKS = ("sts-b", "mrpc", "qnli", "lcqmc", "afqmc")
"""The pair tasks whose embedding baseline is run by default (where their folder exists)."""


def embedding_markdown(env: dict) -> str:
    """The embedding baselines (an envelope) as a markdown table, one row per task, then the skipped tasks."""
    result = env["results"]
    lines = ["| task | fit on | scored | Spearman | Pearson | accuracy (threshold) | R@1 | R@10 | MRR | queries |",
             "|---|---|---|---|---|---|---|---|---|---|"]

    def cell(m: dict, key: str) -> str:
        return f"{m[key]:.2f}" if key in m else "—"

    for t in result["tasks"]:
        m = t["metrics"]
        accuracy = f"{m['accuracy']:.2f} ({m['threshold']:.3f})" if "accuracy" in m else "—"
        lines.append(f"| {t['task']} | {t['fit_split']} ({t['fit_examples']:,}) | {t['split']} ({t['pairs']:,}) | "
                     f"{cell(m, 'spearman')} | {cell(m, 'pearson')} | {accuracy} | {cell(m, 'recall_at_1')} | "
                     f"{cell(m, 'recall_at_10')} | {cell(m, 'mrr')} | {m['queries']:,} |")
    if result["skipped"]:
        lines.append("")
    lines += [f"- skipped {s['task']}: {s['reason']}" for s in result["skipped"]]
    return "\n".join(lines)


def embedding_report(data: Path, tasks: list[str], as_data) -> tuple[list, list]:
    """(scored tasks, skipped tasks) of the embedding baseline, metrics x100 but thresholds and counts."""
    done, skipped = [], []
    for task in tasks:
        folder = FOLDERS.get(task)
        try:
            if folder is None:
                raise AlbertlmError("no usual folder known for this task")
            scores = embedding_baseline_scores(task, data / folder)
        except AlbertlmError as exc:
            skipped.append({"task": task, "reason": as_data(str(exc))})
            print(f"{task}: skipped ({as_data(str(exc))})", file=sys.stderr, flush=True)
            continue
        scores["metrics"] = {k: (v if k in NOT_FRACTIONS else round(100 * v, 2)) for k, v in scores["metrics"].items()}
        done.append({"folder": folder, **scores})
        print(f"{task}: {scores['metrics']}", file=sys.stderr, flush=True)
    return done, skipped


def default_tasks(data: Path) -> list[str]:
    """The tasks whose usual folder exists under the data root, in FOLDERS order."""
    return [task for task, folder in FOLDERS.items() if (data / folder).is_dir()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(SHARED), help="the data root holding SST-2/, CoNLL-2003/ ... "
                   "(default: shared/data beside the checkout)")
    p.add_argument("--tasks", nargs="+", default=None, help=f"registry task names (default: every one of "
                   f"{', '.join(FOLDERS)} whose folder exists under --data)")
    p.add_argument("--out", default=None, help="also write the JSON here")
    p.add_argument("--markdown", action="store_true", help="print a markdown table instead of the JSON")
    p.add_argument("--embedding", action="store_true", help="the tf-idf cosine baseline of the embedding metrics "
                   f"instead (default tasks: {', '.join(EMBEDDING_TASKS)} where their folder exists)")
    args = p.parse_args(argv)
    try:
        require_sklearn()
    except AlbertlmError as exc:
        p.error(str(exc))
    import sklearn

    data = Path(args.data)
    if args.tasks:
        tasks = [get_task(t).name for t in args.tasks]
    else:
        tasks = default_tasks(data)
        tasks = [t for t in EMBEDDING_TASKS if t in tasks] if args.embedding else tasks
    start = time.perf_counter()
    argv = sys.argv[1:] if argv is None else list(argv)
    shown_argv = ["DATA" if a == args.data else a for a in argv]

    def as_data(text: str) -> str:  # the data root as DATA: it is the user's folder, not the repository's
        return text.replace(str(data), "DATA")

    result = {"scikit_learn": sklearn.__version__,
              "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "data": "DATA", "split": SPLIT,
              "units": "metric x100, as albertlm evaluate prints it", "baselines": BASELINES, "tasks": [],
              "skipped": []}
    if args.embedding:
        result["baselines"] = {"tfidf_cosine": "cosine of word (English) or character (Chinese) uni+bigram tf-idf "
                                               "vectors fitted on the training text"}
        result["tasks"], result["skipped"] = embedding_report(data, tasks, as_data)
        tasks = []
    for task in tasks:
        folder = FOLDERS.get(task)
        if folder is None:
            result["skipped"].append({"task": task, "reason": "no usual folder known for this task"})
            continue
        try:
            scores = baseline_scores(task, data / folder)
        except AlbertlmError as exc:  # no train split (QNLI, LCQMC here), no folder, another family
            result["skipped"].append({"task": task, "reason": as_data(str(exc))})
            print(f"{task}: skipped ({exc})", file=sys.stderr, flush=True)
            continue
        result["tasks"].append({"folder": folder, **scores})
        shown = ", ".join(f"{k} {'-' if b['value'] is None else b['value']}" for k, b in scores["baselines"].items())
        print(f"{task} ({scores['metric']}): {shown}", file=sys.stderr, flush=True)
    publish(envelope("benchmarks.baselines", shown_argv, result, started=start), args.out,
            (embedding_markdown if args.embedding else markdown) if args.markdown else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
