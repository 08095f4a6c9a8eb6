"""Commands that move checkpoints between formats: `albertlm convert`."""

from __future__ import annotations

import argparse


def convert_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("src", metavar="SRC", help="a TF1 checkpoint (prefix, .index, or a directory with a 'checkpoint' "
                   "file or one .index), a TF-Hub export, or a Hugging Face directory (config.json + model.safetensors)")
    p.add_argument("dst", metavar="DST", help="the directory to write: new or empty (filled in place), or (with "
                   "--force) an earlier conversion, replaced as a whole")
    p.add_argument("--to", choices=("hf", "tf"), default="hf",
                   help="hf: config.json + model.safetensors + tokenizer files; tf: a TF1 checkpoint in Google's "
                   "layout + albert_config.json + the vocabulary (default: hf)")
    p.add_argument("--config", metavar="FILE", default=None,
                   help="albert_config.json (or an albert_zh config file) for a TF source without one beside it")
    p.add_argument("--force", action="store_true",
                   help="replace an earlier conversion at DST as a whole; a DST holding files convert does not "
                   "write is refused even so")


def convert_run(args: argparse.Namespace) -> int:
    from albertlm.convert import convert

    summary = convert(args.src, args.dst, to=args.to, force=args.force, config=args.config)
    print("\n".join(summary.lines()))
    return 0
