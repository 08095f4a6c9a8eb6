"""Subcommands that make a model: params, tokenizer, data, pretrain, report."""

from __future__ import annotations

import argparse
import sys

from albertlm.options import DeviceSettings, add_dataclass_options, dataclass_from_args


# ---------------------------------------------------------------------------- params
def params_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--batch-tokens", type=int, default=None,
                   help="tokens per training step for the PF (PFLOPs per step) column (default: the paper's 4096 x 512)")


def params_run(args: argparse.Namespace) -> int:
    from albertlm.analysis.params import params_command

    return params_command(as_json=args.json, batch_tokens=args.batch_tokens)


# ---------------------------------------------------------------------------- pretrain
def pretrain_args(p: argparse.ArgumentParser) -> None:
    from albertlm.train.pretrain import RECIPES, PretrainRecipe

    p.add_argument("--name", default=None, help="run name (default: <preset>-<corpus>); the run directory is "
                   "<out-dir>/<name>")
    p.add_argument("--out-dir", default="runs", help="parent of run directories (default: ./runs)")
    p.add_argument("--restart", action="store_true",
                   help="delete an existing run directory of this name and start over (default: resume it)")
    add_dataclass_options(p, DeviceSettings, "device")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--recipe", default="quick", choices=sorted(RECIPES),
                   help="named recipe the options below change (default: quick, the built-in 15-minute CPU run; "
                   "paper: albert-base, 512 tokens, batch 4096, LAMB at 0.00176, 125k steps)")
    from albertlm.data.build import BuildSettings
    from albertlm.train.pretrain_recipe import QUICK_BUILD

    add_dataclass_options(p, PretrainRecipe, "recipe (defaults shown are the quick recipe's)", only_given=True,
                          exclude=("build",))
    add_dataclass_options(p, BuildSettings, "data build (defaults shown are the quick recipe's; the seed is "
                          "--data-seed)", only_given=True, exclude=("seed",), defaults=QUICK_BUILD)


def pretrain_recipe(args: argparse.Namespace):
    """The named recipe (--recipe) with the options given on the command line laid over it."""
    import dataclasses

    from albertlm.data.build import BuildSettings
    from albertlm.train.pretrain import RECIPES, PretrainRecipe

    names = [f.name for cls in (PretrainRecipe, BuildSettings) for f in dataclasses.fields(cls)]
    return RECIPES[args.recipe].with_settings(**{name: getattr(args, name) for name in names if hasattr(args, name)})


def pretrain_run(args: argparse.Namespace) -> int:
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
    name = args.name if args.name is not None else f"{recipe.preset}-{re.sub(r'[^A-Za-z0-9._-]+', '_', Path(recipe.corpus).stem)[:40]}"
    run_dir = run_directory(args.out_dir, name)
    if args.restart:
        check_removable(run_dir)
    ctx = init_distributed(dict(os.environ), device=args.device)  # torchrun's variables
    try:
        summary = pretrain(recipe, run_dir, ctx, resume=not args.restart, restart=args.restart,
                           progress=not args.no_progress)
        if ctx.is_main:
            print(format_summary(summary, recipe.build.objective))
    finally:
        shutdown()
    return 0


# ---------------------------------------------------------------------------- data
def data_args(p: argparse.ArgumentParser) -> None:
    from albertlm.data.build import BuildSettings

    actions = p.add_subparsers(dest="data_action", metavar="ACTION", required=True)
    b = actions.add_parser("build", help="corpus -> SOP/NSP instances -> memory-mapped shards",
                           description="Build train and held-out shards from a corpus, streaming and in "
                           "parallel (format: albertlm.data.shards).")
    b.add_argument("--corpus", required=True, action="append", metavar="SPEC",
                   help="corpus spec: kjv, files, directories, globs, FORMAT:PATH (lines, docs, jsonl), "
                   "parquet:FILES[:COLUMN], arrow:PATH[:COLUMN], hf:DIR[:SPLIT[:COLUMN]] (a local Hugging Face "
                   "dataset); repeat it to read several one after the other, or as SPEC@WEIGHT to mix them "
                   "(a weight is a share of documents; the mixture stops when a source runs out)")
    b.add_argument("--tokenizer", required=True, metavar="DIR", help="directory with spiece.model (SentencePiece) or "
                   "vocab.txt (BERT WordPiece, as Chinese ALBERT models use)")
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


def data_run(args: argparse.Namespace) -> int:
    import json

    if args.data_action == "build":
        from albertlm.data.build import BuildSettings, build_dataset, format_build_summary

        corpus = args.corpus[0] if len(args.corpus) == 1 else args.corpus
        meta = build_dataset(corpus, args.tokenizer, args.out, dataclass_from_args(BuildSettings, args),
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
def tokenizer_args(p: argparse.ArgumentParser) -> None:
    actions = p.add_subparsers(dest="tokenizer_action", metavar="ACTION", required=True)
    t = actions.add_parser("train", help="train a SentencePiece unigram vocabulary with ALBERT's ids",
                           description="Train a SentencePiece unigram vocabulary with ALBERT's ids "
                           "(<pad>=0 <unk>=1 [CLS]=2 [SEP]=3 [MASK]=4); writes DIR/spiece.model and "
                           "DIR/tokenizer_config.json (loadable by transformers' AlbertTokenizer).")
    t.add_argument("--input", "--corpus", "--corpus-spec", dest="input", nargs="+", required=True, metavar="SPEC",
                   help="corpus specs: kjv (built-in King James Bible), files, directories or globs; "
                   "FORMAT:PATH forces a format (lines, docs, jsonl, jsonl=KEY); parquet:, arrow:, hf:DIR[:SPLIT]; "
                   ".gz/.zst are read directly; SPEC@WEIGHT mixes them")
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
    t.add_argument("--text-key", default="text", help="JSONL field or Parquet / Arrow column with the document text (default: text)")
    t.add_argument("--max-line-chars", type=int, default=1_000_000, metavar="N",
                   help="skip (and report) longer lines (default: 1000000)")
    t.add_argument("--threads", type=int, default=None, help="training threads (default: CPUs, at most 16)")
    t.add_argument("--seed", type=int, default=0, help="seed of SentencePiece's sampling (default: 0)")


def tokenizer_run(args: argparse.Namespace) -> int:
    """`albertlm tokenizer train`: read the corpus SPECs, train, write --out, print a summary."""
    from pathlib import Path

    from tqdm import tqdm

    from albertlm.data.corpus import DEFAULT_MAX_LINE_CHARS, Corpus, format_corpus_stats
    from albertlm.outputs import OutputDir
    from albertlm.tokenizer import CONFIG_FILE, MODEL_FILE, TOKENIZER_FILES, train_tokenizer

    corpus = Corpus(args.input, text_key=args.text_key, max_line_chars=args.max_line_chars or DEFAULT_MAX_LINE_CHARS)
    out = OutputDir(args.out, "tokenizer train", TOKENIZER_FILES,
                    inputs=[("--input", path) for files in corpus.files for path in files])

    def sentences():  # a progress bar on a terminal only, never in logs
        return iter(tqdm(corpus.sentences(), desc="reading", unit=" sentences", leave=False,
                         disable=not sys.stderr.isatty()))

    with out.claim():
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


# ---------------------------------------------------------------------------- report
REPORT_FLAGS = {"budget_minutes": "--budget", "sst2_data": "--sst2"}
"""Report settings whose flag is not their field name."""


def report_args(p: argparse.ArgumentParser) -> None:
    from albertlm.analysis.report import ReportSettings

    p.add_argument("--out", default="runs/report", metavar="DIR", help="output directory: report.md, PNG figures, "
                   "results.json, the study's runs (default: runs/report)")
    p.add_argument("--render", action="store_true", help="only re-write DIR/report.md from DIR/results.json: "
                   "nothing is measured or trained, the figures stay, the settings below are not used")
    add_dataclass_options(p, ReportSettings, "report settings", flags=REPORT_FLAGS, exclude=("study", "speed"))


def report_run(args: argparse.Namespace) -> int:
    """Run the study and write DIR/report.md with tables and figures."""
    import dataclasses
    import shlex

    from albertlm.analysis.report import ReportSettings, render_results, run_report

    if args.render:
        print(f"wrote {render_results(args.out)}")
        return 0
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
