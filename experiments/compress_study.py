"""How much of a pretrained BERT survives ALBERT's shapes: the surgery untrained, then distilled.

Two stages, each writing one results file (benchmarks/harness.py's envelope):

    python -m experiments.compress_study text --data DATA --out runs/c/en-train.txt
        the unlabelled English text the study distils on: the train splits of STS-B, SST-2, MRPC,
        RTE, CoLA and CoNLL-2003 (no dev or test text, no label), one text a line, first occurrence
        kept, shuffled with a fixed seed
    python -m experiments.compress_study untrained --teacher DIR --corpus runs/c/en-train.txt --data DATA \
        --out experiments/results/compress/untrained.json
        STS-B dev Spearman (mean pooling, cosine; no labels used) of the teacher and of each student
        straight out of surgery (compress/surgery.py), nothing trained: the factorized embedding alone
        (the LayerNorm-aware basis from the corpus' tokens, and the plain SVD of the word table with
        positions kept at H, which ALBERT's layout cannot hold), then one shared layer from each init
    python -m experiments.compress_study distilled --data DATA --model DIR [--model DIR ...] \
        --out experiments/results/compress/distilled.json
        the same score for directories `albertlm compress` wrote, with what their compress.json records
    python -m experiments.compress_study finetune --data DATA --model NAME=DIR [--model NAME=DIR ...] \
        --tasks sst-2,mrpc --seeds 0,1,2 --runs runs/c/ft --out experiments/results/compress/finetune.json
        `albertlm finetune --task T --model DIR` for every model, task and seed, with one recipe for every
        task (FINETUNE_ARGS, or --finetune-args); each run's results.json is read back (a finished run of the same
        command is not run again; another command's is refused) and its best dev main metric reported with the exact command

The teacher is any directory `albertlm compress` takes (all-MiniLM-L6-v2 in docs/compress.md).
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from albertlm.errors import AlbertlmError
from albertlm.inference.embed_eval import evaluate_embeddings
from benchmarks.baselines import FOLDERS, SHARED
from benchmarks.harness import envelope, publish
from benchmarks.unlabelled_text import split_texts

TRAIN_SOURCES = ("sts-b", "sst-2", "mrpc", "rte", "cola", "conll2003")
"""The tasks whose train split's text the study distils on."""


def build_text(data: Path) -> tuple[list[str], dict]:
    seen, lines, counts = set(), [], {}
    for task in TRAIN_SOURCES:
        texts = split_texts(task, data / FOLDERS[task], "train")
        new = [t for t in (" ".join(t.split()) for t in texts) if t and not (t in seen or seen.add(t))]
        lines += new
        counts[task] = len(new)
    random.Random(0).shuffle(lines)
    return lines, counts


def stsb(model_dir: Path, data: Path) -> float:
    result = evaluate_embeddings(model_dir, "sts-b", data / FOLDERS["sts-b"], "dev")
    return round(100 * result["metrics"]["spearman"], 2)


def untrained(args) -> dict:
    from albertlm.compress import surgery
    from albertlm.compress.run import CompressRecipe
    from albertlm.compress.teacher import load_teacher
    from albertlm.compress.text import batches_of, examples
    from albertlm.data.corpus import Corpus

    teacher = load_teacher(args.teacher)
    recipe = CompressRecipe(embedding_size=args.embedding_size)
    _, stream = examples(Corpus(args.corpus), recipe.seed, recipe.pair_fraction, recipe.heldout)
    texts = [t for _, t in zip(range(recipe.sample_examples), stream)]
    sample = batches_of(teacher.vocabulary, texts, recipe.batch_size, recipe.max_seq_length)
    sums = surgery.embedding_sums(teacher.model, sample)
    rows = {}

    def score(name: str, model) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            model.save_pretrained(tmp)
            teacher.write_beside(model.config, Path(tmp))
            rows[name] = {"stsb_spearman": stsb(Path(tmp), Path(args.data)), "parameters": model.num_parameters()}
        print(name, rows[name], file=sys.stderr, flush=True)

    score("teacher", teacher.model)
    factorized = surgery.factorize_embeddings(teacher.model, args.embedding_size, sums)
    score(f"factorized E={args.embedding_size} (LayerNorm-aware basis of the corpus' tokens)", factorized)
    table_only = surgery.factorize_embeddings(teacher.model, args.embedding_size,
                                              surgery.embedding_sums(teacher.model, [_every_word(teacher.model)]))
    score(f"factorized E={args.embedding_size} (basis of the word table alone)", table_only)
    for init in surgery.SHARE_INITS:
        shared = surgery.share_layers(factorized, 1, init, torch.Generator().manual_seed(0))
        score(f"factorized E={args.embedding_size}, one shared layer, init {init}", shared)
    return {"teacher": args.teacher, "corpus": args.corpus, "rows": rows}


def _every_word(model) -> dict[str, torch.Tensor]:
    """Each vocabulary entry once, at position 0, segment A: a basis that weighs every word alike."""
    V = model.config.vocab_size
    return {"input_ids": torch.arange(V)[:, None], "attention_mask": torch.ones(V, 1, dtype=torch.long),
            "token_type_ids": torch.zeros(V, 1, dtype=torch.long)}


def distilled(args) -> dict:
    rows = {}
    for model in args.model:
        record = json.loads((Path(model) / "compress.json").read_text())
        rows[model] = {"stsb_spearman": stsb(Path(model), Path(args.data)), "recipe": record["recipe"],
                       "steps": record["steps"], "examples": record["examples"], "minutes": record["minutes"],
                       "parameters": record["student"]["parameters"], "heldout": record["heldout"]}
        print(model, rows[model]["stsb_spearman"], file=sys.stderr, flush=True)
    return {"rows": rows}


FINETUNE_ARGS = "--epochs 3 --lr 5e-5 --batch-size 32 --max-seq-length 128"
"""The one fine-tuning recipe of the study, for every task and model (no per-task tuning)."""


def finetune(args) -> dict:
    rows: dict[str, dict] = {}
    data, runs = Path(args.data), Path(args.runs)
    for spec in args.model:
        name, sep, model = spec.partition("=")
        if not sep or not name or not model:
            raise AlbertlmError(f"--model {spec!r}: expected NAME=DIR")
        for task in args.tasks.split(","):
            if task not in FOLDERS:
                raise AlbertlmError(f"--tasks: unknown task {task!r} (one of {', '.join(FOLDERS)})")
            scores = []
            for seed in (int(s) for s in args.seeds.split(",")):
                out = runs / f"{name}-{task}-{seed}"
                command = ["albertlm", "finetune", "--task", task, "--model", model, "--data", str(data / FOLDERS[task]),
                           "--out", str(out), "--seed", str(seed), "--no-progress", *shlex.split(args.finetune_args)]
                done, asked = out / "results.json", out / "study-command.txt"
                if done.exists() and asked.exists() and asked.read_text() != shlex.join(command):
                    raise AlbertlmError(f"{out} holds a run of another command ({asked}); choose another --runs")
                if not (done.exists() and asked.exists()):
                    print("+", shlex.join(command), file=sys.stderr, flush=True)
                    if subprocess.run(command).returncode != 0:
                        raise AlbertlmError(f"{shlex.join(command)} failed")
                    asked.write_text(shlex.join(command))
                result = json.loads(done.read_text())
                metric = result["main_metric"]
                scores.append({"seed": seed, "metric": metric, "value": round(100 * result["best"][metric], 2),
                               "best": result["best"], "steps": result["steps"], "best_step": result["best_step"],
                               "train_seconds": round(result["train_seconds"], 1), "command": shlex.join(command)})
                print(name, task, seed, metric, scores[-1]["value"], file=sys.stderr, flush=True)
            values = [r["value"] for r in scores]
            rows[f"{name}/{task}"] = {"model": name, "model_dir": model, "task": task, "metric": scores[0]["metric"],
                                      "mean": round(sum(values) / len(values), 2), "runs": scores}
    return {"finetune_args": args.finetune_args, "rows": rows}


def render_finetune(result: dict) -> str:
    lines = [f"compress study ({result['date']}): `{result['command']}`", "",
             "| model | task | metric | mean | seeds |", "|---|---|---|---:|---|"]
    for row in result["results"]["rows"].values():
        seeds = ", ".join(f"{r['value']:.2f}" for r in row["runs"])
        lines.append(f"| {row['model']} | {row['task']} | {row['metric']} | {row['mean']:.2f} | {seeds} |")
    return "\n".join(lines)


def render(result: dict) -> str:
    lines = [f"compress study ({result['date']}): `{result['command']}`", "", "| model | parameters | STS-B dev Spearman |",
             "|---|---:|---:|"]
    for name, row in result["results"]["rows"].items():
        lines.append(f"| {name} | {row['parameters']:,} | {row['stsb_spearman']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="stage", required=True)
    t = sub.add_parser("text")
    t.add_argument("--data", default=str(SHARED))
    t.add_argument("--out", required=True)
    u = sub.add_parser("untrained")
    u.add_argument("--teacher", required=True)
    u.add_argument("--corpus", required=True)
    u.add_argument("--embedding-size", type=int, default=128)
    d = sub.add_parser("distilled")
    d.add_argument("--model", action="append", required=True)
    f = sub.add_parser("finetune")
    f.add_argument("--model", action="append", required=True, help="NAME=DIR (repeat)")
    f.add_argument("--tasks", default="sst-2,mrpc,rte,cola,sts-b,conll2003")
    f.add_argument("--seeds", default="0")
    f.add_argument("--runs", required=True, help="where the fine-tuning runs go")
    f.add_argument("--finetune-args", default=FINETUNE_ARGS)
    for q in (u, d, f):
        q.add_argument("--data", default=str(SHARED))
        q.add_argument("--out", default=None)
    args = p.parse_args(argv)
    started = time.perf_counter()
    try:
        if args.stage == "text":
            lines, counts = build_text(Path(args.data))
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
            print(json.dumps({"lines": len(lines), "by_task": counts}))
            return 0
        stages = {"untrained": untrained, "distilled": distilled, "finetune": finetune}
        results = stages[args.stage](args)
    except AlbertlmError as exc:
        print(f"compress_study: error: {exc}", file=sys.stderr)
        return 2
    publish(envelope("experiments.compress_study", argv, results, started=started), args.out,
            render_finetune if args.stage == "finetune" else render)
    return 0


if __name__ == "__main__":
    sys.exit(main())
