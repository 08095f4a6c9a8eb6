"""Why does a pretrained model fine-tune worse than its random-weight control? Cheap checks, no training.

For a pretrained directory and its control (the same configuration and tokenizer, weights drawn at
random as `experiments.finetune_real --reinit` draws them, `benchmarks.start_models.reinit_dir`), on a sample of a sentence task's training set
and its whole dev set:

- loading: the fine-tuning head's backbone equals the pretraining class's tensors (pooler included);
- representations: hidden-state norms per layer, how alike the [CLS], pooled and mean-pooled
  vectors of different sentences are (mean pairwise cosine; near 1 is a collapsed vector that
  carries no sentence information), pooler saturation (|tanh| > 0.9);
- frozen features: dev accuracy of a logistic regression trained on the pooled, [CLS] and
  mean-pooled vectors and on the mean input word embedding (what the weights know before any
  fine-tuning);
- the first fine-tuning step: loss and gradient norm per parameter group, and weight norms.

    python -m experiments.transfer_diagnostics --model runs/albert-mini-sst2text/model --data DATA/SST-2 \
        --out benchmarks/results/transfer-diagnostics/sst2.json

Output: the results envelope (benchmarks/harness.py) on stdout and in --out.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from albertlm import AlbertForPreTraining
from albertlm.config import AlbertConfig
from albertlm.inference.features import feature_settings
from albertlm.inference.load import load_head, load_tokenizer
from albertlm.inference.run import to_device
from albertlm.tasks.common import pad_batch
from albertlm.tasks.registry import get_task
from albertlm.train.finetune import FinetuneRecipe, head_config
from benchmarks.harness import envelope, publish
from benchmarks.start_models import reinit_dir


def control_dir(model: Path, seed: int) -> Path:
    """A temporary folder holding `model`'s config and tokenizer with fresh weights (`reinit_dir`, as
    experiments.finetune_real --reinit draws them) in its one subdirectory, which is returned."""
    return reinit_dir(model, Path(tempfile.mkdtemp(prefix="reinit-")), seed)


def loading_check(head: torch.nn.Module, model: Path) -> dict:
    """Largest difference between the head's backbone and the pretraining class loaded from the same files."""
    pt = AlbertForPreTraining.from_pretrained(model).state_dict()
    sd = head.state_dict()
    shared = [k for k in sd if k in pt]
    return {"compared_tensors": len(shared), "max_abs_diff": max(float((sd[k] - pt[k]).abs().max()) for k in shared),
            "head_only": [k for k in sd if k not in pt]}


@torch.no_grad()
def encode(model: torch.nn.Module, features: list) -> dict[str, torch.Tensor]:
    """Pooled [N, H], [CLS] [N, H], mean-pooled [N, H], mean word embedding [N, E] and labels [N]."""
    model.eval()
    parts: dict[str, list] = {"pooled": [], "cls": [], "meanpool": [], "word_emb": [], "labels": []}
    norms = None
    for k in range(0, len(features), 128):
        b = to_device(pad_batch(features[k:k + 128]), torch.device("cpu"))
        out = model.albert(b["input_ids"], b["attention_mask"], b["token_type_ids"], output_hidden_states=True)
        m = b["attention_mask"].unsqueeze(-1).float()  # [B, S, 1]
        h = out.last_hidden_state
        parts["pooled"].append(out.pooler_output)
        parts["cls"].append(h[:, 0])
        parts["meanpool"].append((h * m).sum(1) / m.sum(1))
        parts["word_emb"].append((model.albert.embeddings.word(b["input_ids"]) * m).sum(1) / m.sum(1))
        parts["labels"].append(b["labels"])
        norms = norms or [round(float(s.norm(dim=-1)[m[..., 0].bool()].mean()), 3) for s in out.hidden_states]
    result = {k: torch.cat(v) for k, v in parts.items()}
    result["layer_norms"] = norms
    return result


def mean_cosine(x: torch.Tensor) -> float:
    """Mean cosine similarity over all pairs of distinct rows of x [N, D]."""
    xn = F.normalize(x, dim=-1)
    n = len(x)
    return float(((xn @ xn.T).sum() - n) / (n * n - n))


def probe(xtr: torch.Tensor, ytr: torch.Tensor, xdv: torch.Tensor, ydv: torch.Tensor, l2: float = 1e-3) -> float:
    """Dev accuracy of an L2-regularised logistic regression on standardised frozen features."""
    mu, sd = xtr.mean(0), xtr.std(0) + 1e-6
    xtr, xdv = (xtr - mu) / sd, (xdv - mu) / sd
    lin = torch.nn.Linear(xtr.shape[1], int(ytr.max()) + 1)
    opt = torch.optim.LBFGS(lin.parameters(), max_iter=300)

    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(lin(xtr), ytr) + l2 * lin.weight.pow(2).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    with torch.no_grad():
        return round(100 * float((lin(xdv).argmax(-1) == ydv).float().mean()), 2)


def first_step(model: torch.nn.Module, features: list) -> dict:
    """Loss and gradient norm per top-level parameter group on one training batch (train mode), weight norms."""
    model.train()
    model.zero_grad()
    out = model(**to_device(pad_batch(features), torch.device("cpu")))
    out.loss.backward()
    groups: dict[str, float] = {}
    for name, p in model.named_parameters():
        group = name.split(".")[1] if name.startswith("albert.") else name.split(".")[0]
        groups[group] = groups.get(group, 0.0) + (float(p.grad.pow(2).sum()) if p.grad is not None else 0.0)
    weights = {n: round(float(p.detach().norm()), 2) for n, p in model.named_parameters()
               if n.endswith(("word.weight", "project.weight", "qkv.weight", "up.weight", "pooler.weight"))}
    return {"loss": round(float(out.loss.detach()), 4), "grad_norms": {k: round(v ** 0.5, 4) for k, v in groups.items()},
            "weight_norms": weights}


def describe(model: torch.nn.Module, train_f: list, dev_f: list) -> dict:
    """Every representation statistic and probe for one model."""
    tr, dv = encode(model, train_f), encode(model, dev_f)
    report = {"layer_norms_train": tr["layer_norms"],
              "mean_cosine_dev": {k: round(mean_cosine(dv[k]), 3) for k in ("pooled", "cls", "meanpool")},
              "pooler_saturated_dev": round(float((dv["pooled"].abs() > 0.9).float().mean()), 3),
              "probe_dev_accuracy": {k: probe(tr[k], tr["labels"], dv[k], dv["labels"])
                                     for k in ("pooled", "cls", "meanpool", "word_emb")}}
    report["first_step"] = first_step(model, train_f[:32])
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="pretrained model directory")
    p.add_argument("--data", required=True, help="the task's data folder (e.g. DATA/SST-2)")
    p.add_argument("--task", default="sst-2", help="a sentence-classification task name")
    p.add_argument("--max-seq-length", type=int, default=64)
    p.add_argument("--train-examples", type=int, default=3000, help="training sentences for the probes")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=None, help="also write the JSON here")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, data, spec = Path(args.model), Path(args.data), get_task(args.task)
    base = AlbertConfig.from_json_file(model / "config.json")
    recipe = FinetuneRecipe(batch_size=32, steps=1, max_seq_length=args.max_seq_length, dropout=0.0,
                            classifier_dropout=0.1, seed=args.seed).resolve(spec, 1)
    settings = feature_settings(recipe, base)
    tokenizer = load_tokenizer(model)
    train, dev = spec.read(data, "train"), spec.read(data, "dev")
    labels = spec.label_list(data, train)
    pick = np.random.default_rng(args.seed).choice(len(train), min(args.train_examples, len(train)), replace=False)
    train_f = spec.family.featurize(spec, [train[i] for i in pick], tokenizer, labels, settings, True)
    dev_f = spec.family.featurize(spec, dev, tokenizer, labels, settings, True)
    config = head_config(spec, base, labels, recipe, settings)
    started = time.perf_counter()
    report = {"model": str(model), "task": spec.name, "train_examples": len(train_f), "dev_examples": len(dev_f),
              "config": {"hidden_dropout_prob": config.hidden_dropout_prob, "layer_norm_eps": config.layer_norm_eps,
                         "do_lower_case": tokenizer.do_lower_case}}
    ctrl = control_dir(model, args.seed)
    try:
        for name, path in (("pretrained", model), ("control", ctrl)):
            torch.manual_seed(args.seed)
            head = load_head(spec, path, config)
            if name == "pretrained":
                report["loading"] = loading_check(head, model)
            report[name] = describe(head, train_f, dev_f)
    finally:
        shutil.rmtree(ctrl.parent)
    publish(envelope("experiments.transfer_diagnostics", argv, report, started=started), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
