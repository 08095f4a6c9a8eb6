"""Score fine-tuned classifiers of one task alone and as an ensemble (the mean of their class
probabilities) on a split, to measure what averaging runs would give before building it into a recipe.

    python -m experiments.ensemble_dev --task sst-2 --data DATA/SST-2 --model runs/a --model runs/b --out ens.json

`--count-member` adds the tf-idf logistic regression of `tasks/baselines.py` (fitted on the training
split, its settings fixed there) as one more member, to measure what a count-based model adds to an
ensemble of networks (it needs scikit-learn).

Each model reads the split with its own tokenizer and feature settings (`inference.evaluate.task_inputs`),
so models of different vocabularies (the no-`--model` command's seeds) average too. Every model must
name the same classes in the same order.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np

from albertlm.errors import AlbertlmError
from albertlm.inference.evaluate import task_inputs
from albertlm.inference.run import check_finite_outputs, run_features
from albertlm.inference.post import score_outputs
from albertlm.utils import atomic_write_text


def probabilities(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, in float64."""
    z = logits.astype(np.float64) - logits.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def count_probabilities(t, data_dir: str) -> np.ndarray:
    """The tf-idf logistic regression's class probabilities for `t`'s examples, columns in `t.labels`' order."""
    from albertlm.tasks.baselines import bag, is_chinese, tfidf_lr

    train = t.spec.read(data_dir, "train", False)
    chinese = is_chinese(train)
    pipe = tfidf_lr().fit([bag(e, chinese) for e in train], [e.label for e in train])
    columns = [list(pipe.classes_).index(label) for label in t.labels]
    return pipe.predict_proba([bag(e, chinese) for e in t.examples])[:, columns]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.ensemble_dev", description=__doc__.splitlines()[0])
    p.add_argument("--task", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--model", action="append", required=True, metavar="DIR",
                   help="a fine-tuned classifier (twice or more)")
    p.add_argument("--split", default="dev")
    p.add_argument("--count-member", action="store_true",
                   help="add the tf-idf logistic regression, fitted on the training split, as a member")
    p.add_argument("--out", help="write the scores there as JSON")
    args = p.parse_args(argv)
    try:
        if len(args.model) + args.count_member < 2:
            raise AlbertlmError("--model: give two or more fine-tuned models to average")
        singles, probs, first = {}, [], None
        for model in args.model:
            t = task_inputs(model, args.data, args.task, args.split)
            if t.spec.family.per_position or t.spec.problem_type != "single_label_classification":
                raise AlbertlmError(f"--task {args.task}: ensembles here average single-label classifiers only")
            if first is None:
                first = t
            elif t.labels != first.labels or len(t.features) != len(first.features):
                raise AlbertlmError(f"--model {model}: its classes or inputs differ from {args.model[0]}'s")
            outputs = run_features(t.loaded.runner, t.spec, t.features, 64, t.loaded.device)
            check_finite_outputs(outputs, t.spec, model)
            singles[model] = score_outputs(t.spec, t.examples, t.features, outputs, t.labels, t.settings)[0]
            probs.append(probabilities(np.stack(outputs["logits"])))
        names = list(args.model)
        if args.count_member:
            if len(first.features) != len(first.examples):
                raise AlbertlmError("--count-member: the split's examples and features differ in number")
            probs.append(count_probabilities(first, args.data))
            names.append("tfidf_lr")

        def ensemble(members: list[int]) -> dict:
            mean = np.mean([probs[i] for i in members], axis=0)
            logits = [row for row in np.log(np.clip(mean, 1e-30, None)).astype(np.float32)]
            return score_outputs(first.spec, first.examples, first.features, {"logits": logits}, first.labels,
                                 first.settings)[0]

        if args.count_member:  # scored alone as a one-member ensemble: its probabilities are all it has
            singles["tfidf_lr"] = ensemble([len(probs) - 1])

        subsets = {" + ".join(names[i] for i in members): ensemble(list(members))
                   for k in range(2, len(probs) + 1) for members in itertools.combinations(range(len(probs)), k)}
    except AlbertlmError as e:
        print(f"ensemble_dev: error: {e}", file=sys.stderr)
        return 2
    result = {"task": args.task, "split": args.split, "models": singles, "ensembles": subsets}
    text = json.dumps(result, indent=2)
    if args.out:
        atomic_write_text(Path(args.out), text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
