"""Command-line options generated from settings dataclasses, typed from their type hints.

Every settings class (PretrainRecipe, BuildSettings, FinetuneRecipe, ReportSettings, the inference
commands' settings in inference/settings.py, DeviceSettings below) becomes a group of `--flags`: the
help text is each field's docstring; int fields take integers, float fields finite numbers, bool
fields `--x / --no-x`, `Literal` fields their choices (listed by --help), and `X | None` numbers also
`none`; a field's `metadata={"metavar": ...}` names its value in the help. The dataclass itself
validates the values (`__post_init__`, `utils.check_field_types` for the types and choices), so the
command line and the Python API refuse the same things.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Literal

Device = Literal["auto", "cpu", "cuda"]
"""What --device takes (`distributed.resolve_device`)."""


@dataclass(frozen=True)
class DeviceSettings:
    """Where a command runs: the one --device of every command that trains or runs a model."""

    device: Device = "auto"
    """where to run: auto (the GPU when CUDA is available, else the CPU), cpu or cuda"""

    def __post_init__(self) -> None:
        from albertlm.utils import check_field_types

        check_field_types(self)


def field_docs(cls) -> dict[str, str]:
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


def _finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def _optional(parse):
    """A parser that also takes `none` (for fields whose None means "off" or "automatic")."""
    def parse_optional(text: str):
        return None if text.lower() == "none" else parse(text)
    parse_optional.__name__ = parse.__name__
    return parse_optional


def flag_spec(hint) -> dict:
    """argparse keywords for a field's type hint: int, float (finite), str, bool, Literal (choices),
    each optionally `| None` (then `none` on the command line gives None, except for strings)."""
    import types
    import typing

    args = typing.get_args(hint)
    optional = typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args
    if optional:
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            raise TypeError(f"unsupported option type {hint}")
        hint = rest[0]
    if typing.get_origin(hint) is typing.Literal:
        choices = list(typing.get_args(hint))
        return {"type": type(choices[0]), "choices": choices + ([None] if optional else [])}
    if hint is bool:
        return {"action": argparse.BooleanOptionalAction}
    parse = {int: _integer, float: _finite_float, str: str}.get(hint)
    if parse is None:
        raise TypeError(f"unsupported option type {hint}")
    return {"type": _optional(parse) if optional and hint is not str else parse}


def add_dataclass_options(p: argparse.ArgumentParser, cls, group_title: str, only_given: bool = False,
                           flags: dict[str, str] | None = None, exclude: tuple[str, ...] = (),
                           defaults=None) -> None:
    """One --option per field of a frozen dataclass, typed from the field's type hint (flag_spec).

    With `only_given`, a flag that is not on the command line leaves no attribute on the namespace
    (argparse.SUPPRESS), so the caller can lay the given ones over a named preset of the dataclass.
    `flags` renames some fields' flags (field name -> flag); `exclude` leaves fields out; `defaults`,
    an instance of `cls`, supplies the defaults shown (default: the class's own).
    """
    import dataclasses
    import typing

    group = p.add_argument_group(group_title)
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in exclude:
            continue
        flag = (flags or {}).get(f.name) or "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name) if defaults is not None else f.default
        help_text = f"{docs.get(f.name, '')} (default: {default})".replace("%", "%%")  # argparse formats help
        value = argparse.SUPPRESS if only_given else default
        named = {"metavar": f.metadata["metavar"]} if "metavar" in f.metadata else {}
        group.add_argument(flag, dest=f.name, default=value, help=help_text, **flag_spec(hints[f.name]), **named)


def dataclass_from_args(cls, args: argparse.Namespace, exclude: tuple[str, ...] = ()):
    import dataclasses

    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if f.name not in exclude})
