"""The `albertlm` command: a thin table of subcommands over the library's functions.

Each subcommand is a pair (add its arguments, run it), kept in the module of its kind
(pretraining.py: models made; tasks.py: models used). Errors meant for the user (AlbertlmError)
print as one line and exit with status 2; nothing else reads argv.
"""

from __future__ import annotations

import argparse
import errno
import sys
from collections.abc import Callable

from albertlm.cli import checkpoints, compress, distill, embed, export, pretraining, serve, tasks
from albertlm.cli.pretraining import pretrain_recipe
from albertlm.errors import AlbertlmError

__all__ = ["COMMANDS", "build_parser", "main", "pretrain_recipe"]

# name -> (help, add_arguments(parser), run(args) -> exit code)
Command = tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]

COMMANDS: dict[str, Command] = {
    "data": ("build pretraining shards from a corpus, or print their statistics", pretraining.data_args, pretraining.data_run),
    "pretrain": ("pretrain ALBERT (MLM + SOP); with no arguments: the quick recipe, albert-mini on the King James Bible",
                 pretraining.pretrain_args, pretraining.pretrain_run),
    "params": ("parameter, FLOP and communication accounting for every preset and the paper's ablations",
               pretraining.params_args, pretraining.params_run),
    "tokenizer": ("train a SentencePiece vocabulary with ALBERT's ids: albertlm tokenizer train --input kjv "
                  "--vocab-size 8000 --out tok/", pretraining.tokenizer_args, pretraining.tokenizer_run),
    "finetune": ("fine-tune on a task (GLUE, SQuAD, RACE, NER, Chinese sets, generic files) and keep the best dev "
                 "checkpoint: albertlm finetune --task sst-2 --model DIR --data DIR; without --model, train a model "
                 "from the task's data alone within --budget MINUTES", tasks.finetune_args, tasks.finetune_run),
    "distill": ("train a smaller student from a fine-tuned classifier: albertlm distill --teacher DIR --student "
                "albert-mini --task sst-2 --data DIR", distill.distill_args, distill.distill_run),
    "evaluate": ("score a fine-tuned model on a task split: albertlm evaluate --model DIR --data DIR",
                 tasks.evaluate_args, tasks.evaluate_run),
    "predict": ("predictions of a fine-tuned model for lines of input (files or stdin)", tasks.predict_args, tasks.predict_run),
    "fill-mask": ('fill [MASK] with a pretrained model: albertlm fill-mask --model DIR "text with [MASK]"',
                  tasks.fill_mask_args, tasks.fill_mask_run),
    "embed": ("sentence vectors, one per input line, from any ALBERT directory (sentence-transformers ones too): "
              "albertlm embed DIR --input texts.txt --output vectors.npy", embed.embed_args, embed.embed_run),
    "serve": ("serve a model over HTTP with dynamic batching (POST /predict, /embed, /v1/embeddings; GET /health, "
              "/info, /metrics): albertlm serve DIR --port 8080", serve.serve_args, serve.serve_run),
    "report": ("reproduce the paper's findings at small scale (parameters, speed, embedding size, sharing, SOP vs "
               "NSP, smoothness) as DIR/report.md with figures: albertlm report --quick --out DIR",
               pretraining.report_args, pretraining.report_run),
    "convert": ("convert a checkpoint: Google's TF1 / TF-Hub / albert_zh or any BERT (transformers or "
                "sentence-transformers) to a Hugging Face ALBERT directory, or back with --to tf: albertlm convert "
                "model.ckpt-best OUT", checkpoints.convert_args, checkpoints.convert_run),
    "compress": ("make a pretrained BERT small in ALBERT's shapes (factorized embedding, shared layers, pruned FFN), "
                 "distilled on unlabelled text within --budget minutes: albertlm compress BERT_DIR --out DIR",
                 compress.compress_args, compress.compress_run),
    "export": ("export a model directory to ONNX (each shared tensor stored once; --pooling for sentence vectors; "
               "--int8 for onnxruntime int8), a sentence-transformers directory or a Triton model repository: "
               "albertlm export --format onnx DIR model.onnx", export.export_args, export.export_run),
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
        print(f"albertlm {args.command}: error: {describe_os_error(exc)}", file=sys.stderr)
        return 2


def describe_os_error(exc: OSError) -> str:
    """One line for an operating-system error that reached the command: the file and what went wrong.

    A full disk says that the file was written atomically (every albertlm output is), so what existed
    before is intact.
    """
    where = f" writing {exc.filename}" if exc.filename else ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        full = "no space left on the device" if exc.errno == errno.ENOSPC else "disk quota exceeded"
        return (f"{full}{where}; files are written atomically, so what existed before is intact: free some "
                "space and run the command again")
    what = exc.strerror or " ".join(str(exc).split()) or type(exc).__name__  # a library's OSError("text")
    if exc.errno == errno.EROFS:
        what += ": choose an output on a writable file system"
    names = " -> ".join(str(n) for n in (exc.filename, exc.filename2) if n)
    return f"{names}: {what}" if names else what
