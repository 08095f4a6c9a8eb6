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


COMMANDS: dict[str, Command] = {
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
