"""`albertlm compress`: a pretrained BERT or unfactorized ALBERT made small in the paper's shapes (compress/)."""

from __future__ import annotations

import argparse


def compress_args(p: argparse.ArgumentParser) -> None:
    from albertlm.compress.run import CompressRecipe
    from albertlm.options import DeviceSettings, add_dataclass_options

    p.add_argument("src", metavar="SRC", help="the teacher: a BERT directory (transformers or sentence-transformers, "
                   "as `albertlm convert --from bert` reads), or an ALBERT directory with E == H and sharing none")
    p.add_argument("--out", required=True, metavar="DIR", help="the output: a new or empty directory, or an earlier "
                   "compress run of the same recipe, which is resumed")
    p.add_argument("--corpus", action="append", metavar="SPEC", default=None,
                   help="unlabelled text to distil on, in any form `albertlm pretrain --corpus` takes (a file, a folder, "
                   "jsonl/parquet/hf:..., kjv for the built-in King James Bible); repeat for several (default: kjv)")
    add_dataclass_options(p, DeviceSettings, "device")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_dataclass_options(p, CompressRecipe, "compression")


def compress_run(args: argparse.Namespace) -> int:
    """Compress SRC into --out and print what was built."""
    from albertlm.compress.run import COMPRESS_FILES, CompressRecipe, compress, ratio
    from albertlm.compress.teacher import load_teacher
    from albertlm.data.corpus import Corpus
    from albertlm.distributed import resolve_device
    from albertlm.options import dataclass_from_args
    from albertlm.outputs import OutputDir

    recipe = dataclass_from_args(CompressRecipe, args)
    device = resolve_device(args.device)
    corpus = Corpus(args.corpus or ["kjv"])
    out = OutputDir(args.out, "compress", COMPRESS_FILES, inputs={"SRC": args.src})
    teacher = load_teacher(args.src)
    record = compress(teacher.model, teacher.vocabulary, corpus, out, recipe, source=teacher.record(args.src),
                      write_extras=teacher.write_beside, device=device, progress=not args.no_progress)
    student, before, after = record["student"], record["heldout"]["before"], record["heldout"]["after"]
    print(f"teacher:  {record['teacher']['kind']}, {record['teacher_parameters']:,} parameters")
    print(f"student:  {student['config']}, {student['parameters']:,} parameters "
          f"({ratio(record['teacher_parameters'], student['parameters'])})")
    print(f"distilled {record['steps']} steps ({record['examples']:,} examples) in {record['minutes']:.1f} min")
    if before and after:
        print(f"held out: hidden-state MSE {before['hidden_mse']:.4f} -> {after['hidden_mse']:.4f}, "
              f"pooled cosine to the teacher {before['pooled_cosine']:.4f} -> {after['pooled_cosine']:.4f}")
    print(f"wrote:    {out.path}")
    return 0
