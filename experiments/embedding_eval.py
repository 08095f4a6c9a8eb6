"""Sentence vectors of a model against the tf-idf cosine baseline, in one markdown table: STS-B (Spearman,
Pearson), LCQMC (accuracy at the best cosine threshold) and retrieval on both (recall@1, recall@10, MRR).

    python -m experiments.embedding_eval --data DATA --model runs/stsb-mnrl --model-zh runs/lcqmc-simcse \\
        --out runs/embedding_eval.json

--model scores STS-B (an English vocabulary), --model-zh LCQMC (a Chinese one); a task without its model
shows the baseline alone. The model's numbers are `albertlm embed DIR --evaluate TASK` (inference/embed_eval.py),
the baseline's `albertlm.tasks.baselines.embedding_baseline_scores` (fitted on the training text, on the test
split's text for LCQMC, which has no training split here). DATA holds STS-B/ and LCQMC/ (shared/data's layout);
it is written as DATA in the JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from albertlm.errors import AlbertlmError
from albertlm.tasks.pairs import NOT_FRACTIONS
from albertlm.utils import atomic_write_text

TASKS = {"sts-b": ("STS-B", ("spearman", "pearson")), "lcqmc": ("LCQMC", ("accuracy",))}
"""task -> (its folder under DATA, its pair metrics); retrieval's follow for each."""
RETRIEVAL = ("recall_at_1", "recall_at_10", "mrr")


def rows(baseline: dict[str, dict], model: dict[str, dict | None]) -> list[tuple[str, str, float, float | None]]:
    """(task, metric, baseline value, model value or None) for every row of the table, x100."""
    out = []
    for task, (_, metrics) in TASKS.items():
        if task not in baseline:
            continue
        for name in (*metrics, *RETRIEVAL):
            mine = model.get(task)
            out.append((task if name not in RETRIEVAL else f"{task} retrieval", name,
                        100 * baseline[task]["metrics"][name], None if mine is None else 100 * mine["metrics"][name]))
    return out


def markdown(table: list[tuple[str, str, float, float | None]], models: dict[str, str | None]) -> str:
    """The rows as one markdown table, the model column "pending" where no model was given."""
    lines = ["| task | metric | tf-idf cosine | model |", "|---|---|---|---|"]
    for task, name, base, mine in table:
        shown = f"{mine:.2f}" if mine is not None else "pending (no model given)"
        lines.append(f"| {task} | {name} | {base:.2f} | {shown} |")
    given = [f"{task}: {path}" for task, path in models.items() if path]
    return "\n".join(lines) + ("\n\nmodels: " + "; ".join(given) if given else "")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.embedding_eval", description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="the data root holding STS-B/ and LCQMC/")
    p.add_argument("--model", help="an English embedding model directory, scored on STS-B")
    p.add_argument("--model-zh", help="a Chinese embedding model directory, scored on LCQMC")
    p.add_argument("--out", help="also write the JSON here (atomically)")
    args = p.parse_args(argv)
    from albertlm.inference.embed import EmbedSettings
    from albertlm.inference.embed_eval import evaluate_embeddings
    from albertlm.tasks.baselines import embedding_baseline_scores

    data, models = Path(args.data), {"sts-b": args.model, "lcqmc": args.model_zh}
    try:
        present = [task for task, (folder, _) in TASKS.items() if (data / folder).is_dir()]
        if not present:
            raise AlbertlmError(f"--data {args.data}: holds neither STS-B/ nor LCQMC/")
        baseline, scored = {}, {}
        for task in present:
            folder = data / TASKS[task][0]
            baseline[task] = embedding_baseline_scores(task, folder)
            scored[task] = (evaluate_embeddings(models[task], task, folder, settings=EmbedSettings(progress=False))
                            if models[task] else None)
    except AlbertlmError as exc:
        print(f"embedding_eval: error: {exc}".replace(str(data), "DATA"), file=sys.stderr)
        return 2
    table = rows(baseline, scored)
    print(markdown(table, models))
    if args.out:
        record = {"data": "DATA", "models": models, "units": "baseline and model metrics as fractions (but "
                  f"{', '.join(NOT_FRACTIONS)}); rows x100", "baseline": baseline, "model": scored,
                  "rows": [dict(zip(("task", "metric", "tfidf_cosine", "model"), r)) for r in table]}
        atomic_write_text(args.out, json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
