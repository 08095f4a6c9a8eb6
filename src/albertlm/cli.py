"""The `albertlm` command: a thin table of subcommands over the library's functions.

Each subcommand is a pair (add its arguments, run it). Errors meant for the user (AlbertlmError)
print as one line and exit with status 2; nothing else reads argv.
"""

from __future__ import annotations

import argparse
import errno
import sys
from collections.abc import Callable

from albertlm.errors import AlbertlmError
from albertlm.options import add_dataclass_options, dataclass_from_args

# name -> (help, add_arguments(parser), run(args) -> exit code)
Command = tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]


# ---------------------------------------------------------------------------- params
def _params_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--batch-tokens", type=int, default=None,
                   help="tokens per training step for the PF (PFLOPs per step) column (default: the paper's 4096 x 512)")


def _params_run(args: argparse.Namespace) -> int:
    from albertlm.analysis.params import params_command

    return params_command(as_json=args.json, batch_tokens=args.batch_tokens)


# ---------------------------------------------------------------------------- pretrain
def _pretrain_args(p: argparse.ArgumentParser) -> None:
    from albertlm.train.pretrain import RECIPES, PretrainRecipe

    p.add_argument("--name", default=None, help="run name (default: <preset>-<corpus>); the run directory is "
                   "<out-dir>/<name>")
    p.add_argument("--out-dir", default="runs", help="parent of run directories (default: ./runs)")
    p.add_argument("--restart", action="store_true",
                   help="delete an existing run directory of this name and start over (default: resume it)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where to train")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--recipe", default="quick", choices=sorted(RECIPES),
                   help="named recipe the options below change (default: quick, the built-in 15-minute CPU run; "
                   "paper: albert-base, 512 tokens, batch 4096, LAMB at 0.00176, 125k steps)")
    add_dataclass_options(p, PretrainRecipe, "recipe (defaults shown are the quick recipe's)", only_given=True)


def pretrain_recipe(args: argparse.Namespace):
    """The named recipe (--recipe) with the options given on the command line laid over it."""
    import dataclasses

    from albertlm.train.pretrain import RECIPES, PretrainRecipe

    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(PretrainRecipe) if hasattr(args, f.name)}
    return dataclasses.replace(RECIPES[args.recipe], **given)


def _pretrain_run(args: argparse.Namespace) -> int:
    """Pretrain; with no arguments, the quick recipe (albert-mini) on the built-in King James corpus.

    Everything is validated before anything is written or deleted: the recipe, the corpus, the
    run name (a plain name under --out-dir) and, with --restart, that the directory is a run
    albertlm created. pretrain() then locks the directory for the whole run.
    """
    import os
    import re
    from pathlib import Path

    from albertlm.data.corpus import Corpus
    from albertlm.distributed import init_distributed, shutdown
    from albertlm.rundir import check_removable, run_directory
    from albertlm.train.pretrain import format_summary, pretrain

    recipe = pretrain_recipe(args)
    Corpus(recipe.corpus)  # a corpus that cannot be read fails here, before any work
    name = args.name or f"{recipe.preset}-{re.sub(r'[^A-Za-z0-9._-]+', '_', Path(recipe.corpus).stem)[:40]}"
    run_dir = run_directory(args.out_dir, name)
    if args.restart:
        check_removable(run_dir)
    ctx = init_distributed(dict(os.environ), device=args.device)  # torchrun's variables
    try:
        summary = pretrain(recipe, run_dir, ctx, resume=not args.restart, restart=args.restart,
                           progress=not args.no_progress)
        if ctx.is_main:
            print(format_summary(summary))
    finally:
        shutdown()
    return 0


# ---------------------------------------------------------------------------- data
def _data_args(p: argparse.ArgumentParser) -> None:
    from albertlm.data.build import BuildSettings

    actions = p.add_subparsers(dest="data_action", metavar="ACTION", required=True)
    b = actions.add_parser("build", help="corpus -> SOP/NSP instances -> memory-mapped shards",
                           description="Build train and held-out shards from a corpus, streaming and in "
                           "parallel (format: albertlm.data.shards).")
    b.add_argument("--corpus", required=True, metavar="SPEC", help="corpus spec: kjv, files, directories, globs, "
                   "FORMAT:PATH (lines, docs, jsonl)")
    b.add_argument("--tokenizer", required=True, metavar="DIR", help="directory with spiece.model")
    b.add_argument("--out", required=True, metavar="DIR", help="output directory")
    b.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_dataclass_options(b, BuildSettings, "settings")
    s = actions.add_parser("stats", help="examples, tokens, padding, mask rate, n-grams, label balance",
                           description="Statistics of a built data directory.")
    s.add_argument("directory", metavar="DIR", help="an `albertlm data build` output directory")
    s.add_argument("--split", default="train", choices=["train", "heldout"], help="which split (default: train)")
    s.add_argument("--sample", type=int, default=4000, help="examples whose dynamic masks are drawn (default: 4000)")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.add_argument("--verify", action="store_true", help="first check every shard against the sha256 recorded "
                   "by the build (a changed file fails with its name)")


def _data_run(args: argparse.Namespace) -> int:
    import json

    if args.data_action == "build":
        from albertlm.data.build import BuildSettings, build_dataset, format_build_summary

        meta = build_dataset(args.corpus, args.tokenizer, args.out, dataclass_from_args(BuildSettings, args),
                             progress=not args.no_progress)
        print(format_build_summary(meta))
        return 0
    from albertlm.data.stats import data_stats, format_stats

    if args.verify:
        from pathlib import Path

        from albertlm.data.loader import read_build_meta, verify_shards

        checked = verify_shards(Path(args.directory), read_build_meta(Path(args.directory)))
        print(f"verified {checked} shard(s) against their sha256" if checked else
              "this build records no checksums (built by an older albertlm): nothing to verify", flush=True)
    stats = data_stats(args.directory, args.split, args.sample)
    print(json.dumps(stats, indent=2) if args.json else format_stats(stats))
    return 0


# ---------------------------------------------------------------------------- tokenizer
def _tokenizer_args(p: argparse.ArgumentParser) -> None:
    actions = p.add_subparsers(dest="tokenizer_action", metavar="ACTION", required=True)
    t = actions.add_parser("train", help="train a SentencePiece unigram vocabulary with ALBERT's ids",
                           description="Train a SentencePiece unigram vocabulary with ALBERT's ids "
                           "(<pad>=0 <unk>=1 [CLS]=2 [SEP]=3 [MASK]=4); writes DIR/spiece.model and "
                           "DIR/tokenizer_config.json (loadable by transformers' AlbertTokenizer).")
    t.add_argument("--input", "--corpus", "--corpus-spec", dest="input", nargs="+", required=True, metavar="SPEC",
                   help="corpus specs: kjv (built-in King James Bible), files, directories or globs; "
                   "FORMAT:PATH forces a format (lines, docs, jsonl, jsonl=KEY); .gz/.zst are read directly")
    t.add_argument("--vocab-size", type=int, required=True, metavar="N",
                   help="pieces, special tokens included (the paper: 30000); shrunk with a notice to "
                   "the largest size the corpus supports unless --strict")
    t.add_argument("--out", required=True, metavar="DIR", help="output directory")
    t.add_argument("--cased", action="store_true", help="do not lower-case")
    t.add_argument("--keep-accents", action="store_true", help="do not strip accents (NFKD + combining marks)")
    t.add_argument("--chinese", action="store_true", help="force Chinese mode (one piece per CJK character, "
                   "jieba word boundaries); detected automatically when most characters are CJK")
    t.add_argument("--strict", action="store_true", help="fail instead of shrinking an oversize --vocab-size")
    t.add_argument("--input-sentence-size", type=int, default=2_000_000, metavar="N",
                   help="sentences SentencePiece samples from the corpus; bounds its memory (default: 2000000)")
    t.add_argument("--text-key", default="text", help="JSONL field with the document text (default: text)")
    t.add_argument("--max-line-chars", type=int, default=1_000_000, metavar="N",
                   help="skip (and report) longer lines (default: 1000000)")
    t.add_argument("--threads", type=int, default=None, help="training threads (default: CPUs, at most 16)")
    t.add_argument("--seed", type=int, default=0, help="seed of SentencePiece's sampling (default: 0)")


def _tokenizer_run(args: argparse.Namespace) -> int:
    """`albertlm tokenizer train`: read the corpus SPECs, train, write --out, print a summary."""
    from pathlib import Path

    from tqdm import tqdm

    from albertlm.data.corpus import DEFAULT_MAX_LINE_CHARS, Corpus, format_corpus_stats
    from albertlm.tokenizer import CONFIG_FILE, MODEL_FILE, train_tokenizer

    corpus = Corpus(args.input, text_key=args.text_key, max_line_chars=args.max_line_chars or DEFAULT_MAX_LINE_CHARS)

    def sentences():  # a progress bar on a terminal only, never in logs
        return iter(tqdm(corpus.sentences(), desc="reading", unit=" sentences", leave=False,
                         disable=not sys.stderr.isatty()))

    result = train_tokenizer(sentences, args.out, args.vocab_size, do_lower_case=not args.cased,
                             keep_accents=args.keep_accents, chinese=True if args.chinese else None,
                             strict=args.strict, input_sentence_size=args.input_sentence_size,
                             num_threads=args.threads, seed=args.seed)
    print(format_corpus_stats(corpus.stats), file=sys.stderr)
    mode = ", Chinese mode" if result.chinese else ""
    print(f"wrote {Path(args.out) / MODEL_FILE} and {CONFIG_FILE}: {result.vocab_size:,} pieces "
          f"({'cased' if args.cased else 'lower-cased'}, accents {'kept' if args.keep_accents else 'stripped'}"
          f"{mode}) from {result.sentences:,} sentences in {result.seconds:.1f} s")
    return 0


# ---------------------------------------------------------------------------- fine-tuning and inference
def _one_line_warnings() -> None:
    """Show library warnings (e.g. skipped malformed data rows) as one `warning:` line each."""
    import warnings

    warnings.showwarning = lambda message, *rest, **kw: print(f"warning: {message}", file=sys.stderr)


def _finetune_args(p: argparse.ArgumentParser) -> None:
    from albertlm.train.finetune import FinetuneRecipe

    p.add_argument("--task", required=True, help="task name, e.g. sst-2, cola, mrpc, sts-b, squad-v1.1, race, "
                   "conll2003, chnsenticorp, tnews, cluener, or a generic one (classification, regression, "
                   "multilabel, ner-conll); `--task list` prints them all with their metrics")
    p.add_argument("--model", metavar="DIR", help="pretrained model: `albertlm pretrain` output or any Hugging Face "
                   "ALBERT directory with spiece.model")
    p.add_argument("--data", metavar="DIR", help="the task's data directory (train and dev files)")
    p.add_argument("--out", metavar="DIR", default=None, help="output directory (default: runs/finetune-<task>)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where to train")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    g = p.add_argument_group("generic tasks")
    g.add_argument("--text-column", default=None, help="column of the text (default: text)")
    g.add_argument("--text-pair-column", default=None, help="column of the second text of a pair")
    g.add_argument("--label-column", default=None, help="column of the label (default: label)")
    add_dataclass_options(p, FinetuneRecipe, "recipe (unset: the task's default, paper Table 14 where it has one)")


def _task_from_args(args: argparse.Namespace):
    from albertlm.tasks.registry import get_task

    return get_task(args.task, text_column=args.text_column, text_pair_column=args.text_pair_column,
                    label_column=args.label_column)


def _finetune_run(args: argparse.Namespace) -> int:
    """Fine-tune on a task, keep the best dev checkpoint, print the metrics table."""
    from albertlm.tasks.registry import task_table
    from albertlm.train.finetune import FinetuneRecipe, finetune, format_results

    if args.task == "list":
        print(task_table())
        return 0
    if not args.model or not args.data:
        raise AlbertlmError("--model DIR and --data DIR are required")
    _one_line_warnings()
    spec = _task_from_args(args)
    results = finetune(spec, args.model, args.data, args.out or f"runs/finetune-{spec.name}",
                       dataclass_from_args(FinetuneRecipe, args), device=args.device, progress=not args.no_progress)
    print(format_results(results))
    return 0


def _evaluate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, metavar="DIR", help="a fine-tuned model directory")
    p.add_argument("--data", required=True, metavar="DIR", help="the task's data directory (or the split's file)")
    p.add_argument("--task", default=None, help="task name (default: the finetuning_task in the model's config.json)")
    p.add_argument("--split", default="dev", choices=["dev", "test", "train"], help="split to score (default: dev)")
    p.add_argument("--batch-size", type=int, default=64, help="features per forward pass (default: 64)")
    p.add_argument("--max-examples", type=int, default=None, help="score only the first N examples")
    p.add_argument("--predictions", metavar="FILE", default=None, help="also write the predictions (task format)")
    p.add_argument("--max-answer-length", type=int, default=None, metavar="N", help="QA: longest answer in pieces "
                   "(default: what the model was fine-tuned with; 30, or 64 for a Chinese vocabulary)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where to run")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _evaluate_run(args: argparse.Namespace) -> int:
    """Score a fine-tuned model on a task split."""
    import json

    from albertlm.train.inference import evaluate_dir

    _one_line_warnings()
    result = evaluate_dir(args.model, args.data, args.task, args.split, batch_size=args.batch_size,
                          max_examples=args.max_examples, predictions=args.predictions, device=args.device,
                          max_answer_length=args.max_answer_length)
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
    return 0


def _predict_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, metavar="DIR", help="a fine-tuned model directory")
    p.add_argument("files", nargs="*", metavar="FILE", help="input files, one example per line (default or '-': "
                   "stdin): text or text_a<TAB>text_b (classification), text (NER), question<TAB>context or JSON "
                   "(QA), JSON {context, question, options} (multiple choice)")
    p.add_argument("--batch-size", type=int, default=64, help="examples per forward pass (default: 64)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where to run")
    p.add_argument("--prepack", action="store_true", help="CPU only: run on a copy with oneDNN-packed weights "
                   "(faster for small batches of base and larger models; docs/benchmarks.md)")


def _predict_run(args: argparse.Namespace) -> int:
    """Print one prediction line per input line."""
    from albertlm.train.inference import predict_lines

    if args.batch_size < 1:
        raise AlbertlmError(f"--batch-size must be at least 1, got {args.batch_size}")
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
    for out in predict_lines(args.model, lines, device=args.device, batch_size=args.batch_size,
                             prepack=args.prepack):
        print(out)
    return 0


def _fill_mask_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, metavar="DIR", help="a pretrained model directory (with its MLM head)")
    p.add_argument("text", help='text with one or more [MASK], e.g. "the capital of france is [MASK] ."')
    p.add_argument("--top-k", type=int, default=5, help="candidates shown per mask (default: 5)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where to run")


def _fill_mask_run(args: argparse.Namespace) -> int:
    """Print the filled text and the top candidates of every mask."""
    from albertlm.train.inference import fill_mask

    filled, candidates = fill_mask(args.model, args.text, top_k=args.top_k, device=args.device)
    print(filled)
    for n, cands in enumerate(candidates, 1):
        print(f"[MASK] {n}: " + "  ".join(f"{piece} {p:.3f}" for piece, p in cands))
    return 0


# ---------------------------------------------------------------------------- report
REPORT_FLAGS = {"budget_minutes": "--budget", "sst2_data": "--sst2"}
"""Report settings whose flag is not their field name."""


def _report_args(p: argparse.ArgumentParser) -> None:
    from albertlm.analysis.report import ReportSettings

    p.add_argument("--out", default="runs/report", metavar="DIR", help="output directory: report.md, PNG figures, "
                   "results.json, the study's runs (default: runs/report)")
    add_dataclass_options(p, ReportSettings, "report settings", flags=REPORT_FLAGS, exclude=("study", "speed"))


def _report_run(args: argparse.Namespace) -> int:
    """Run the study and write DIR/report.md with tables and figures."""
    import dataclasses
    import shlex

    from albertlm.analysis.report import ReportSettings, run_report

    settings = dataclass_from_args(ReportSettings, args, exclude=("study", "speed"))
    command = ["albertlm", "report", "--out", args.out]
    for f in dataclasses.fields(ReportSettings):  # the settings that differ from the defaults, as flags
        value = getattr(settings, f.name)
        if f.name in ("study", "speed") or value == f.default:
            continue
        flag = REPORT_FLAGS.get(f.name) or "--" + f.name.replace("_", "-")
        command += [flag] if value is True else [flag, str(value)]
    path = run_report(settings, args.out, command=shlex.join(command))
    print(f"wrote {path}")
    return 0


COMMANDS: dict[str, Command] = {
    "data": ("build pretraining shards from a corpus, or print their statistics", _data_args, _data_run),
    "pretrain": ("pretrain ALBERT (MLM + SOP); with no arguments: the quick recipe, albert-mini on the King James Bible",
                 _pretrain_args, _pretrain_run),
    "params": ("parameter, FLOP and communication accounting for every preset and the paper's ablations",
               _params_args, _params_run),
    "tokenizer": ("train a SentencePiece vocabulary with ALBERT's ids: albertlm tokenizer train --input kjv "
                  "--vocab-size 8000 --out tok/", _tokenizer_args, _tokenizer_run),
    "finetune": ("fine-tune on a task (GLUE, SQuAD, RACE, NER, Chinese sets, generic files) and keep the best dev "
                 "checkpoint: albertlm finetune --task sst-2 --model DIR --data DIR", _finetune_args, _finetune_run),
    "evaluate": ("score a fine-tuned model on a task split: albertlm evaluate --model DIR --data DIR",
                 _evaluate_args, _evaluate_run),
    "predict": ("predictions of a fine-tuned model for lines of input (files or stdin)", _predict_args, _predict_run),
    "fill-mask": ('fill [MASK] with a pretrained model: albertlm fill-mask --model DIR "text with [MASK]"',
                  _fill_mask_args, _fill_mask_run),
    "report": ("reproduce the paper's findings at small scale (parameters, speed, embedding size, sharing, SOP vs "
               "NSP, smoothness) as DIR/report.md with figures: albertlm report --quick --out DIR",
               _report_args, _report_run),
}


def build_parser() -> argparse.ArgumentParser:
    from albertlm import __version__

    parser = argparse.ArgumentParser(prog="albertlm", description="ALBERT (A Lite BERT) in PyTorch.")
    parser.add_argument("--version", action="version", version=f"albertlm {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_text, add_args, run) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_args(p)
        p.set_defaults(_run=run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "_run"):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except AlbertlmError as exc:
        print(f"albertlm {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"albertlm {args.command}: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        where = f" writing {exc.filename}" if exc.filename else ""
        print(f"albertlm {args.command}: error: no space left on the device{where}; files are written atomically, "
              "so what existed before is intact: free some space and run the command again", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
