"""Commands that move checkpoints between formats: `albertlm convert`."""

from __future__ import annotations

import argparse

from albertlm.convert import SOURCE_FORMATS


def convert_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("src", metavar="SRC", help="a TF1 checkpoint (prefix, .index, or a directory with a 'checkpoint' "
                   "file or one .index), a TF-Hub export, a Hugging Face directory (config.json + model.safetensors), "
                   "or a BERT to import as ALBERT: a transformers BERT directory or a sentence-transformers one")
    p.add_argument("dst", metavar="DST", help="the directory to write: new or empty (filled in place), or (with "
                   "--force) an earlier conversion, replaced as a whole")
    p.add_argument("--from", dest="source_format", choices=SOURCE_FORMATS, default="auto",
                   help="what SRC is: auto (detected; a config.json with model_type bert is a BERT), tf, hf, or "
                   "bert: a BERT written as the ALBERT that computes the same (E = H, sharing none), a "
                   "sentence-transformers SRC as a sentence-transformers directory (default: auto)")
    p.add_argument("--to", choices=("hf", "tf"), default="hf",
                   help="hf: config.json + model.safetensors + tokenizer files; tf: a TF1 checkpoint in Google's "
                   "layout + albert_config.json + the vocabulary; a BERT is written as hf only (default: hf)")
    p.add_argument("--config", metavar="FILE", default=None,
                   help="albert_config.json (or an albert_zh config file) for a TF source without one beside it")
    p.add_argument("--force", action="store_true",
                   help="replace an earlier conversion at DST as a whole; a DST holding files convert does not "
                   "write is refused even so")


def convert_run(args: argparse.Namespace) -> int:
    from albertlm.convert import convert

    summary = convert(args.src, args.dst, to=args.to, force=args.force, config=args.config,
                      source_format=args.source_format)
    print("\n".join(summary.lines()))
    return 0
