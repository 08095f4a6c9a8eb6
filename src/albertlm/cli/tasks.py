"""Subcommands that use a model: finetune, evaluate, predict, fill-mask."""

from __future__ import annotations

import argparse
import sys

from albertlm.errors import AlbertlmError
from albertlm.options import DeviceSettings, add_dataclass_options, dataclass_from_args


# ---------------------------------------------------------------------------- fine-tuning and inference
def _one_line_warnings() -> None:
    """Show library warnings (e.g. skipped malformed data rows) as one `warning:` line each."""
    import warnings

    warnings.showwarning = lambda message, *rest, **kw: print(f"warning: {message}", file=sys.stderr)


def finetune_args(p: argparse.ArgumentParser) -> None:
    from albertlm.train.embedding import EmbeddingSettings
    from albertlm.train.finetune import FinetuneRecipe
    from albertlm.train.scratch import DEFAULT_BUDGET_MINUTES, DEFAULT_RECIPE

    kinds = {"ner": "tagging (NER)", "classification": "sentence and pair"}
    presets = "".join(f"{preset} for {kinds.get(family, family)} tasks, " for family, preset
                      in DEFAULT_RECIPE.family_presets) + DEFAULT_RECIPE.preset
    presets += " for the rest" if DEFAULT_RECIPE.family_presets else ""
    on_for = ("on for " + " and ".join(kinds.get(f, f) for f in DEFAULT_RECIPE.self_distill_families) + " tasks, off "
              "for the rest" if DEFAULT_RECIPE.self_distill_families else "off")
    p.add_argument("--task", required=True, help="task name, e.g. sst-2, cola, mrpc, sts-b, squad-v1.1, race, "
                   "conll2003, chnsenticorp, tnews, cluener, or a generic one (classification, regression, "
                   "multilabel, ner-conll); `--task list` prints them all with their metrics")
    p.add_argument("--model", metavar="DIR", help="pretrained model: `albertlm pretrain` output or any Hugging Face "
                   "ALBERT directory with spiece.model, or a Chinese ALBERT one with a WordPiece vocab.txt; without "
                   "it, a model is trained from scratch on the task's data alone (its own vocabulary, a random "
                   f"{presets}) within --budget")
    p.add_argument("--data", metavar="DIR", help="the task's data directory (train and dev files)")
    p.add_argument("--budget", type=float, metavar="MINUTES", default=None, help="without --model: wall time for "
                   "the whole run (vocabulary, model, baselines, fine-tuning); the steps are chosen to fit "
                   f"(default: {DEFAULT_BUDGET_MINUTES:g})")
    p.add_argument("--unlabelled", action="append", metavar="SPEC", default=None, help="without --model: more "
                   "text of the task's language and domain, without labels (a corpus SPEC as `albertlm pretrain "
                   "--corpus` reads: a .txt of one sentence a line, .jsonl, Parquet, a folder, a glob; repeat for "
                   "more); its sentences join the training text's for the word vectors that start the model's word "
                   "table (the vocabulary stays the training text's). Default: none")
    p.add_argument("--vocab-case", choices=("cased", "uncased"), default=None, help="without --model: keep the "
                   "training text's case in the task vocabulary, or lower-case it (default: cased for tagging tasks, "
                   "where case marks names; uncased for sentence tasks, as ALBERT's vocabularies are)")
    p.add_argument("--preset", metavar="NAME", default=None, help="without --model: the architecture trained from "
                   "random weights (`albertlm params` lists them; albert-small has about 2.5x albert-tiny's compute a "
                   f"token). Default: the recipe's, {presets}")
    p.add_argument("--self-distill", choices=("on", "off"), default=None, help="without --model: where the budget "
                   "holds the plan twice, train the model, then a second one from the same start taught by the first "
                   "(its distribution at T 2, half and half with the labels); the second is the result, the first "
                   f"stays in OUT/teacher (default: {on_for})")
    p.add_argument("--vocab-size", type=int, metavar="N", default=None, help="without --model: pieces asked of the "
                   "task vocabulary (fewer when the text supports fewer; for Chinese at least its distinct characters "
                   "plus 1,000). Default: the recipe's, train/scratch.py")
    training_run_args(p, "runs/finetune-<task>")
    add_dataclass_options(p, FinetuneRecipe, "recipe (unset: the task's default, paper Table 14 where it has one; "
                          "without --model, the from-scratch recipe's, train/scratch.py)", only_given=True)
    add_dataclass_options(p, EmbeddingSettings, "objective (sentence embeddings: docs/embeddings.md)", only_given=True)


def training_run_args(p: argparse.ArgumentParser, default_out: str) -> None:
    """--out, --device, --no-progress and the generic tasks' columns: what every task-training command takes."""
    p.add_argument("--out", metavar="DIR", default=None, help=f"output directory (default: {default_out})")
    add_dataclass_options(p, DeviceSettings, "device")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    g = p.add_argument_group("generic tasks")
    g.add_argument("--text-column", default=None, help="column of the text (default: text)")
    g.add_argument("--text-pair-column", default=None, help="column of the second text of a pair")
    g.add_argument("--label-column", default=None, help="column of the label (default: label)")


def task_from_args(args: argparse.Namespace):
    from albertlm.tasks.registry import get_task

    return get_task(args.task, text_column=args.text_column, text_pair_column=args.text_pair_column,
                    label_column=args.label_column)


def finetune_run(args: argparse.Namespace) -> int:
    """Fine-tune on a task, keep the best dev checkpoint, print the metrics table; without --model, train
    from scratch within --budget (a task head, or with --objective a sentence embedder) and print the
    count-based baseline beside the dev score."""
    import dataclasses

    from albertlm.tasks.registry import task_table
    from albertlm.train.embedding import EmbeddingSettings
    from albertlm.train.finetune import FinetuneRecipe, finetune, format_results

    if args.task == "list":
        print(task_table())
        return 0
    if not args.data:
        raise AlbertlmError("--data DIR is required (with --model DIR to start from a pretrained model, or without "
                            "it to train from scratch within --budget MINUTES)")
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(FinetuneRecipe) if hasattr(args, f.name)}
    objective = {f.name: getattr(args, f.name) for f in dataclasses.fields(EmbeddingSettings) if hasattr(args, f.name)}
    if args.model is None:
        return _finetune_from_scratch(args, given, objective)
    embedding = EmbeddingSettings(**objective)
    if args.budget is not None:
        raise AlbertlmError("--budget sizes a run without --model; with --model set --steps or --epochs")
    if args.vocab_size is not None:
        raise AlbertlmError("--vocab-size sets the vocabulary of a run without --model; with --model the model's "
                            "vocabulary is used")
    if args.preset is not None:
        raise AlbertlmError("--preset sets the architecture of a run without --model; with --model the model's "
                            "config.json is used")
    if args.vocab_case:
        raise AlbertlmError("--vocab-case sets the vocabulary of a run without --model; with --model the model's "
                            "tokenizer keeps or lower-cases the case as it was trained")
    if args.self_distill is not None:
        raise AlbertlmError("--self-distill trains a second model in a run without --model; with --model, distil a "
                            "fine-tuned run with albertlm distill --teacher DIR")
    if args.unlabelled:
        raise AlbertlmError("--unlabelled feeds the word vectors of a run without --model; with --model, pretrain "
                            "on that text first (albertlm pretrain --corpus SPEC) and fine-tune the result")
    _one_line_warnings()
    spec = task_from_args(args)
    if embedding.objective != "task":
        return _finetune_embedder(args, spec, FinetuneRecipe(**given), embedding)
    results = finetune(spec, args.model, args.data, args.out or f"runs/finetune-{spec.name}",
                       FinetuneRecipe(**given), device=args.device, progress=not args.no_progress)
    print(format_results(results))
    return 0


def _finetune_embedder(args: argparse.Namespace, spec, recipe, embedding) -> int:
    """finetune with an embedding objective (train/embedding.py): the table, then where the vectors are."""
    from albertlm.train.embedding import finetune_embedder, format_embedding
    from albertlm.train.finetune import format_results

    results = finetune_embedder(spec, args.model, args.data, args.out or f"runs/finetune-{spec.name}", recipe, embedding,
                                device=args.device, progress=not args.no_progress)
    print(format_results(results))
    print(format_embedding(results))
    return 0


def _finetune_from_scratch(args: argparse.Namespace, given: dict, objective: dict) -> int:
    """finetune without --model (train/scratch.py; with an embedding objective, train/scratch_embedding.py):
    the recipe flags given are laid over the default recipe; without --objective, the task's data picks it
    (scratch_embedding.default_objective: graded pairs train a CoSENT bi-encoder, the rest the task head)."""
    import dataclasses

    from albertlm.train import scratch_embedding
    from albertlm.train.embedding import EmbeddingSettings, format_embedding
    from albertlm.train.finetune import format_results
    from albertlm.train.scratch import (DEFAULT_BUDGET_MINUTES, DEFAULT_RECIPE, SUPPORTED, baseline_wins,
                                        finetune_from_scratch, format_scratch)

    spec = task_from_args(args)
    notes = []  # shown before the run's first stage line, so that a refusal stays one line
    if "objective" not in objective:
        objective["objective"] = scratch_embedding.default_objective(spec, args.data)
        if objective["objective"] != "task":
            notes.append(f"{spec.name}: graded sentence pairs: training a sentence embedder (--objective "
                         f"{objective['objective']}; the cosine of the two texts' vectors is the score); --objective "
                         "task trains the task's cross-encoder head instead")

    def log(line: str) -> None:
        for note in notes:
            print(note, file=sys.stderr, flush=True)
        notes.clear()
        print(line, file=sys.stderr, flush=True)
    embedding = EmbeddingSettings(**objective)
    embedder = embedding.objective != "task"
    default = scratch_embedding.default_recipe(embedding.objective) if embedder else DEFAULT_RECIPE
    recipe = default.with_finetune(**given)
    if args.vocab_size is not None:
        if args.vocab_size < 100:
            raise AlbertlmError(f"--vocab-size must be at least 100, got {args.vocab_size}")
        recipe = dataclasses.replace(recipe, vocab_size=args.vocab_size, chinese_vocab_size=args.vocab_size)
    if args.preset is not None:
        from albertlm.config import PRESETS
        if args.preset not in PRESETS:
            raise AlbertlmError(f"--preset {args.preset!r} is unknown; choose one of {', '.join(PRESETS)}")
        recipe = recipe.with_preset(args.preset)
    if args.vocab_case:
        recipe = dataclasses.replace(recipe, cased_families=SUPPORTED if args.vocab_case == "cased" else ())
    if args.self_distill is not None:
        recipe = dataclasses.replace(recipe, self_distill_families=SUPPORTED if args.self_distill == "on" else ())
    _one_line_warnings()
    out = args.out or f"runs/finetune-{spec.name}"
    budget = DEFAULT_BUDGET_MINUTES if args.budget is None else args.budget
    run = dict(device=args.device, progress=not args.no_progress, log=log, unlabelled=args.unlabelled or ())
    if embedder:
        results = scratch_embedding.embedder_from_scratch(spec, args.data, out, budget, recipe, embedding, **run)
        print(format_results(results))
        print(format_scratch(results))
        print(format_embedding(results))
        return 0
    results = finetune_from_scratch(spec, args.data, out, budget, recipe, **run)
    print(format_results(results))
    print(format_scratch(results, scratch_embedding.suggested_objectives(spec, args.data) if baseline_wins(results)
                         else None, tagger=spec.family.name == "ner"))
    return 0


def evaluate_args(p: argparse.ArgumentParser) -> None:
    from albertlm.inference.settings import EarlyExitSettings, EvaluateSettings, Int8Settings

    p.add_argument("--model", required=True, metavar="DIR", help="a fine-tuned model directory")
    p.add_argument("--data", required=True, metavar="DIR", help="the task's data directory (or the split's file)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_dataclass_options(p, EvaluateSettings, "scoring")
    add_dataclass_options(p, DeviceSettings, "device")
    add_dataclass_options(p, EarlyExitSettings, "early exit (a model fine-tuned with --early-exit)")
    add_dataclass_options(p, Int8Settings, "int8")


def evaluate_run(args: argparse.Namespace) -> int:
    """Score a fine-tuned model on a task split."""
    import dataclasses
    import json

    from albertlm.inference.evaluate import evaluate_dir
    from albertlm.inference.settings import EarlyExitSettings, EvaluateSettings, Int8Settings

    settings = dataclass_from_args(EvaluateSettings, args)  # each refused with one line before any work
    early, int8 = dataclass_from_args(EarlyExitSettings, args), dataclass_from_args(Int8Settings, args)
    _one_line_warnings()
    embedder = _embedder(args, early, int8, settings.batch_size)
    if embedder is not None:
        return _evaluate_embedder(args, settings, *embedder)
    result = evaluate_dir(args.model, args.data, **dataclasses.asdict(settings), **dataclasses.asdict(early),
                          device=args.device, int8=int8.backend)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{result['task']} {result['split']}: {result['examples']:,} examples")
    for name, value in result["metrics"].items():
        if name in ("total", "entities"):
            print(f"  {name:<18}{value:>10.0f}")
        elif name.endswith("_thresh"):  # a no-answer score threshold, not a percentage
            print(f"  {name:<18}{value:>10.4f}")
        else:
            print(f"  {name:<18}{100 * value:>10.2f}")
    if "early_exit" in result:
        e = result["early_exit"]
        print(f"  early exit: patience {e['patience']}, {e['average_layers']:.2f} of {e['layers']} layers run on "
              f"average ({e['speedup']:.2f}x fewer)")
    return 0


def _embedder(args: argparse.Namespace, early, int8, batch_size: int):
    """For a sentence embedder trained here (config.json records its objective and task): (that record, the
    EmbedSettings `evaluate` and `predict` run it with); None for any other directory. Exit heads are
    refused in one line."""
    from albertlm.inference.embed import EmbedSettings
    from albertlm.inference.embed_eval import embedding_record

    record = embedding_record(args.model)
    if record is None:
        return None
    if early.patience is not None:
        raise AlbertlmError(f"--patience: {args.model} is a sentence embedder, without exit heads")
    return record, EmbedSettings(batch_size=batch_size, device=args.device, int8=int8.int8,
                                 int8_backend=int8.int8_backend, progress=False)


def _evaluate_embedder(args: argparse.Namespace, settings, record: dict, embed) -> int:
    """`albertlm evaluate` on a sentence embedder: its vectors scored on the pairs of its task (embed_eval)."""
    import json

    from albertlm.inference.embed_eval import evaluate_embeddings, format_table

    for flag, value in (("--predictions", settings.predictions), ("--max-answer-length", settings.max_answer_length)):
        if value is not None:
            raise AlbertlmError(f"{flag}: {args.model} is a sentence embedder; it is scored by the cosines of its "
                                "vectors, not by predictions")
    task = settings.task or record.get("task")
    if not isinstance(task, str):
        raise AlbertlmError(f"{args.model}: config.json records no task for this sentence embedder; pass --task")
    result = evaluate_embeddings(args.model, task, args.data, settings.split, embed, settings.max_examples)
    print(json.dumps(result, indent=2) if args.json else format_table(result))
    return 0


def predict_args(p: argparse.ArgumentParser) -> None:
    from albertlm.inference.settings import EarlyExitSettings, Int8Settings, PredictSettings

    p.add_argument("--model", required=True, metavar="DIR", help="a fine-tuned model directory")
    p.add_argument("files", nargs="*", metavar="FILE", help="input files, one example per line (default or '-': "
                   "stdin): text or text_a<TAB>text_b (classification), text (NER), question<TAB>context or JSON "
                   "(QA), JSON {context, question, options} (multiple choice)")
    add_dataclass_options(p, PredictSettings, "prediction")
    add_dataclass_options(p, DeviceSettings, "device")
    add_dataclass_options(p, EarlyExitSettings, "early exit (a model fine-tuned with --early-exit)")
    add_dataclass_options(p, Int8Settings, "int8")


def predict_run(args: argparse.Namespace) -> int:
    """Print one prediction line per input line."""
    from albertlm.inference.predict import predict_lines
    from albertlm.inference.settings import EarlyExitSettings, Int8Settings, PredictSettings

    settings = dataclass_from_args(PredictSettings, args)  # refused before stdin is read
    early, int8 = dataclass_from_args(EarlyExitSettings, args), dataclass_from_args(Int8Settings, args)
    _one_line_warnings()
    lines: list[str] = []
    for name in args.files or ["-"]:
        try:
            if name == "-":
                lines += sys.stdin.buffer.read().decode("utf-8").splitlines()
            else:
                with open(name, encoding="utf-8") as fh:
                    lines += fh.read().splitlines()
        except OSError as exc:
            raise AlbertlmError(f"{name}: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise AlbertlmError(f"{'stdin' if name == '-' else name}: not valid UTF-8 (byte {exc.start})") from None
    embedder = _embedder(args, early, int8, settings.batch_size)
    if embedder is not None:
        from albertlm.inference.embed_eval import pair_cosine_lines

        if settings.prepack:
            raise AlbertlmError(f"--prepack: {args.model} is a sentence embedder; prepacked weights are for "
                                "fine-tuned heads")
        for out in pair_cosine_lines(args.model, lines, embedder[1], "stdin" if not args.files else "input"):
            print(out)
        return 0
    exit_layers: list = []
    for out in predict_lines(args.model, lines, device=args.device, batch_size=settings.batch_size,
                             prepack=settings.prepack, patience=early.patience,
                             regression_threshold=early.regression_threshold, exit_layers=exit_layers,
                             int8=int8.backend):
        print(out)
    run = [n for n in exit_layers if n is not None]
    if early.patience is not None and run:
        print(f"early exit: patience {early.patience}, {sum(run) / len(run):.2f} layers run on average "
              f"over {len(run)} inputs", file=sys.stderr)
    return 0


def fill_mask_args(p: argparse.ArgumentParser) -> None:
    from albertlm.inference.settings import FillMaskSettings

    p.add_argument("--model", required=True, metavar="DIR", help="a pretrained model directory (with its MLM head)")
    p.add_argument("text", help='text with one or more [MASK], e.g. "the capital of france is [MASK] ."')
    add_dataclass_options(p, FillMaskSettings, "candidates")
    add_dataclass_options(p, DeviceSettings, "device")


def fill_mask_run(args: argparse.Namespace) -> int:
    """Print the filled text and the top candidates of every mask."""
    from albertlm.inference.fill_mask import fill_mask
    from albertlm.inference.settings import FillMaskSettings

    settings = dataclass_from_args(FillMaskSettings, args)
    filled, candidates = fill_mask(args.model, args.text, top_k=settings.top_k, device=args.device)
    print(filled)
    for n, cands in enumerate(candidates, 1):
        print(f"[MASK] {n}: " + "  ".join(f"{piece} {p:.3f}" for piece, p in cands))
    return 0
