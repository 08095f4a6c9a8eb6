"""The `albertlm` command: a thin table of subcommands over the library's functions.

Each subcommand is a pair (add its arguments, run it). Errors meant for the user (AlbertlmError)
print as one line and exit with status 2; nothing else reads argv.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from albertlm.errors import AlbertlmError

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


# ---------------------------------------------------------------------------- dataclass options
def _field_docs(cls) -> dict[str, str]:
    """The docstring under each field of a dataclass (so the help text is the docstring)."""
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body
    docs = {}
    for node, nxt in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
            docs[node.target.id] = nxt.value.value
    return docs


def _add_dataclass_options(p: argparse.ArgumentParser, cls, group_title: str) -> None:
    """One --option per field of a frozen dataclass, typed from its default."""
    import dataclasses

    group = p.add_argument_group(group_title)
    docs = _field_docs(cls)
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        default = f.default
        help_text = f"{docs.get(f.name, '')} (default: {default})"
        if isinstance(default, bool):
            group.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=default, help=help_text)
        else:
            kind = type(default) if default is not None else (float if "lr" in f.name else
                                                             int if "size" in f.name else str)
            group.add_argument(flag, dest=f.name, type=kind, default=default, help=help_text)


def _dataclass_from_args(cls, args: argparse.Namespace):
    import dataclasses

    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})


# ---------------------------------------------------------------------------- pretrain
def _pretrain_args(p: argparse.ArgumentParser) -> None:
    from albertlm.train.pretrain import PretrainRecipe

    p.add_argument("--name", default=None, help="run name (default: <preset>-<corpus>); the run directory is "
                   "<out-dir>/<name>")
    p.add_argument("--out-dir", default="runs", help="parent of run directories (default: ./runs)")
    p.add_argument("--restart", action="store_true",
                   help="delete an existing run directory of this name and start over (default: resume it)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where to train")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    _add_dataclass_options(p, PretrainRecipe, "recipe")


def _pretrain_run(args: argparse.Namespace) -> int:
    """Pretrain; with no arguments, albert-tiny on the built-in King James corpus."""
    import os
    import re
    import shutil
    from pathlib import Path

    from albertlm.distributed import init_distributed, shutdown
    from albertlm.train.pretrain import PretrainRecipe, format_summary, pretrain

    recipe = _dataclass_from_args(PretrainRecipe, args)
    name = args.name or f"{recipe.preset}-{re.sub(r'[^A-Za-z0-9._-]+', '_', Path(recipe.corpus).stem)[:40]}"
    run_dir = Path(args.out_dir) / name
    ctx = init_distributed(dict(os.environ), device=args.device)  # torchrun's variables
    try:
        if args.restart and ctx.is_main and run_dir.exists():
            shutil.rmtree(run_dir)
        resume = (run_dir / "checkpoints" / "latest").exists() and not args.restart
        if resume and ctx.is_main:
            print(f"resuming the run in {run_dir} (pass --restart to start over)", flush=True)
        summary = pretrain(recipe, run_dir, ctx, resume=resume, progress=not args.no_progress)
        if ctx.is_main:
            print(format_summary(summary))
    finally:
        shutdown()
    return 0


COMMANDS: dict[str, Command] = {
    "pretrain": ("pretrain ALBERT (MLM + SOP, LAMB); with no arguments: albert-tiny on the King James Bible",
                 _pretrain_args, _pretrain_run),
    "params": ("parameter, FLOP and communication accounting for every preset and the paper's ablations",
               _params_args, _params_run),
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
