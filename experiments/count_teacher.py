"""Train a classifier from a no-`--model` run's base with a count-based teacher: the tf-idf logistic
regression's out-of-fold class probabilities on the training examples as soft targets beside the labels.

    python -m experiments.count_teacher --task sst-2 --data DATA/SST-2 --run runs/sst2-s0 --out runs/ct-s0

`--run` is a finished `albertlm finetune` run without `--model`: the student starts from its `base/`
and trains with its recipe (recipe.json; `--seed` replaces the seed), so the run itself is the control
of the same seed. The teacher is `tasks/baselines.py`'s tf-idf logistic regression, fitted `--folds`
times, each time on all training examples but one fold and predicting that fold, so no example's soft
target comes from a model that saw its label. The objective is distillation's (train/distill.py) with
these probabilities as the teacher's logits (their log), at `--temperature` with weight `--alpha`.
It needs scikit-learn; it measures whether the lever is worth building into the command.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import torch

from albertlm.config import AlbertConfig
from albertlm.errors import AlbertlmError
from albertlm.inference.load import load_head, load_tokenizer
from albertlm.tasks.registry import get_task
from albertlm.train.distill import distill_objective
from albertlm.train.finetune import FinetuneRecipe, head_config, output_dir, prepare_task, start_outputs, train_task
from albertlm.train.loop import unpadded


def out_of_fold(train: list, labels: list[str], folds: int, seed: int) -> np.ndarray:
    """[N, C] tf-idf LR probabilities of every training example from the model fitted without its fold."""
    from sklearn.model_selection import StratifiedKFold

    from albertlm.tasks.baselines import bag, is_chinese, tfidf_lr

    chinese = is_chinese(train)
    docs = [bag(e, chinese) for e in train]
    y = np.array([e.label for e in train])
    probs = np.zeros((len(train), len(labels)))
    for fit, held in StratifiedKFold(folds, shuffle=True, random_state=seed).split(docs, y):
        pipe = tfidf_lr().fit([docs[i] for i in fit], y[fit])
        columns = [list(pipe.classes_).index(label) for label in labels]
        probs[held] = pipe.predict_proba([docs[i] for i in held])[:, columns]
    return probs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.count_teacher", description=__doc__.splitlines()[0])
    p.add_argument("--task", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--run", required=True, help="a finished no---model fine-tuning run (its base/ and recipe)")
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int)
    p.add_argument("--alpha", type=float, default=0.5)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--folds", type=int, default=5)
    args = p.parse_args(argv)
    try:
        spec = get_task(args.task)
        if spec.family.per_position or spec.problem_type != "single_label_classification":
            raise AlbertlmError(f"--task {args.task}: the count teacher here is for single-label classification")
        results = json.loads((Path(args.run) / "results.json").read_text())
        recipe = FinetuneRecipe(**results["recipe"])
        recipe = dataclasses.replace(recipe, seed=recipe.seed if args.seed is None else args.seed)
        base_dir = Path(args.run) / "base"
        base = AlbertConfig.from_json_file(base_dir / "config.json")
        tokenizer = load_tokenizer(base_dir)
        run = prepare_task(spec, args.data, recipe, tokenizer, base)
        if len(run.train_f) != len(run.train_ex):
            raise AlbertlmError("the training examples and features differ in number")
        probs = out_of_fold(run.train_ex, run.labels, args.folds, recipe.seed)
        agree = float(np.mean(probs.argmax(1) == np.array([run.labels.index(e.label) for e in run.train_ex])))
        for f, row in zip(run.train_f, probs):
            f.inputs["teacher_logits"] = np.log(np.clip(row, 1e-12, None)).astype(np.float32)
            f.inputs["hard_weight"] = np.float32(1.0)
        out = output_dir(args.out, "distill", {"--data": args.data, "--run": args.run})
        with out.claim():
            record = {"count_teacher": "tfidf_lr out of fold", "folds": args.folds, "alpha": args.alpha,
                      "temperature": args.temperature, "teacher_train_accuracy": agree, "run": args.run}
            start_outputs(out.path, {"task": spec.name, **dataclasses.asdict(run.recipe), "distillation": record})
            torch.manual_seed(run.recipe.seed)
            config = head_config(spec, base, run.labels, run.recipe, run.settings)
            model = load_head(spec, base_dir, config)
            unpad = unpadded(run.recipe.unpad, model, torch.device("cpu"))
            loss_fn, count_fn = distill_objective(spec.problem_type, args.temperature, args.alpha, unpad)
            res = train_task(run, model.train(), tokenizer, out.path, loss_fn=loss_fn, count_fn=count_fn,
                             device=torch.device("cpu"), progress=False, name="distill",
                             record={"model_dir": str(base_dir), "distillation": record})
    except AlbertlmError as e:
        print(f"count_teacher: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"best": res["best"], "best_step": res["best_step"], "teacher_train_accuracy": agree,
                      "dev_curve": res["dev_curve"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
