"""JSON values (as json.loads gives them) checked against type hints and built into frozen dataclasses.

The type hints say everything a value must be. Besides the plain types, `typing.Annotated` adds:

- `Bound(lo, hi)`: a number's interval (`Fraction = Annotated[float, Bound(0, 1)]`);
- `NONEMPTY`: a list or dict needs at least one entry;
- `Keys("a", "b")`: a dict needs these entries.

Every float must be finite and every int at most 2**53 in magnitude (a JSON number beyond that is
not exact anywhere), whatever its bound. A dataclass may define `check(self)`: the checks between its
fields, run once its fields are built; it raises `Invalid(field, expected, got)`. A `Reader` can
give classes defined elsewhere (settings) stricter hints for some fields without editing them.

Every refusal is an AlbertlmError of one line: the field's path (`study.runs['x'].seed`), what it
must be, and what it is.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass
from typing import Any

from albertlm.errors import AlbertlmError

MAX_INT = 2**53
"""The largest integer magnitude read: every integer up to it is exact as a float (and in JSON)."""


@dataclass(frozen=True)
class Bound:
    """`Annotated` metadata of a number: the interval it must lie in (None: open on that side)."""

    lo: float | None = None
    hi: float | None = None
    above: bool = False
    """Exclude lo itself (> lo rather than >= lo)."""

    def holds(self, x: float) -> bool:
        low = self.lo is None or (x > self.lo if self.above else x >= self.lo)
        return low and (self.hi is None or x <= self.hi)

    def __str__(self) -> str:
        if self.lo is not None and self.hi is not None:
            return f" in {'(' if self.above else '['}{self.lo:g}, {self.hi:g}]"
        if self.lo is not None:
            return f" {'>' if self.above else '>='} {self.lo:g}"
        return "" if self.hi is None else f" <= {self.hi:g}"


@dataclass(frozen=True)
class Keys:
    """`Annotated` metadata of a dict: entries it must hold."""

    names: tuple[str, ...]

    def __init__(self, *names: str) -> None:
        object.__setattr__(self, "names", names)


NONEMPTY = "non-empty"
"""`Annotated` metadata of a list or dict: it needs at least one entry."""

Fraction = typing.Annotated[float, Bound(0, 1)]
NonNegative = typing.Annotated[float, Bound(0)]
Positive = typing.Annotated[float, Bound(0, above=True)]
Count = typing.Annotated[int, Bound(0)]
Size = typing.Annotated[int, Bound(1)]


class Invalid(AlbertlmError):
    """A `check` method's refusal: the field (relative to the record), what it must be, its value
    (shown as its repr, or as `shown`)."""

    def __init__(self, field: str, expected: str, got: Any, shown: str | None = None) -> None:
        super().__init__(f"{field}: must be {expected}, got {shown or repr(got)}")
        self.field, self.expected, self.got, self.shown = field, expected, got, shown


_NOUNS = {float: "a finite number", int: "an integer", bool: "true or false", str: "a string"}


class Reader:
    """Builds typed values from JSON values; `overrides` maps a dataclass to stricter hints of some fields."""

    def __init__(self, overrides: dict[type, dict[str, Any]] | None = None) -> None:
        self.overrides = overrides or {}
        self._hints: dict[type, dict[str, Any]] = {}

    def parse(self, tp: Any, value: Any, where: str = "") -> Any:
        """`value` checked against the type `tp` and built into it.

        Dataclasses are built field by field (a missing field takes its default if it has one; an
        unknown key is an error), lists, tuples and dicts element by element. Numbers are not
        converted (an int stays an int in a float field), so writing the result back gives the same JSON.

        Raises:
            AlbertlmError: `<where>: must be <what>, got <value>` (or missing, unknown field).
        """
        meta: tuple[Any, ...] = ()
        if typing.get_origin(tp) is typing.Annotated:
            tp, meta = tp.__origin__, tp.__metadata__
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if tp is Any:
            return value
        if origin in (typing.Union, types.UnionType):
            if value is None and type(None) in args:
                return None
            rest = [a for a in args if a is not type(None)]
            return self.parse(rest[0], value, where)
        if origin is typing.Literal:
            if value not in args:
                wrong(where, " or ".join(map(repr, args)), value)
            return value
        if dataclasses.is_dataclass(tp):
            return self._record(tp, value, where)
        if origin in (list, tuple):
            if not isinstance(value, (list, tuple)):
                wrong(where, "a list", value)
            _sized(meta, value, where, "list")
            items = [self.parse(args[0], x, f"{where}[{i}]") for i, x in enumerate(value)]
            return items if origin is list else tuple(items)
        if origin is dict:
            if not isinstance(value, dict):
                wrong(where, "an object", value)
            _sized(meta, value, where, "object")
            return {k: self.parse(args[1], v, f"{where}[{k!r}]") for k, v in value.items()}
        return _scalar(tp, meta, value, where)

    def _record(self, cls: type, value: Any, where: str) -> Any:
        if not isinstance(value, dict):
            wrong(where or cls.__name__, f"an object ({cls.__name__})", value)
        if cls not in self._hints:  # resolving the hints is most of the time a record takes
            self._hints[cls] = {**typing.get_type_hints(cls, include_extras=True), **self.overrides.get(cls, {})}
        hints = self._hints[cls]
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = [k for k in value if k not in fields]
        if unknown:
            key = unknown[0]
            path = at(where, key) if key.isidentifier() else f"{where}[{key!r}]"
            raise AlbertlmError(f"{path}: unknown field in {cls.__name__}")
        kwargs = {}
        for name, f in fields.items():
            if name in value:
                kwargs[name] = self.parse(hints[name], value[name], at(where, name))
            elif not self._has_default(cls, f):
                raise AlbertlmError(f"{at(where, name)}: missing field of {cls.__name__}")
        try:
            record = cls(**kwargs)
        except AlbertlmError as e:  # the class's own check (settings)
            raise AlbertlmError(f"{where or cls.__name__}: {e}") from None
        try:
            if hasattr(record, "check"):
                record.check()
        except Invalid as e:
            wrong(at(where, e.field), e.expected, e.got, e.shown)
        except AlbertlmError as e:  # a field the check parsed further, its path relative to the record
            raise AlbertlmError(at(where, str(e))) from None
        return record

    def _has_default(self, cls: type, f: dataclasses.Field) -> bool:
        """Whether a missing field may take its default: one it has that fits a stricter hint given here."""
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            return False
        if f.name not in self.overrides.get(cls, {}) or f.default is dataclasses.MISSING:
            return True
        try:
            self.parse(self.overrides[cls][f.name], f.default)
        except AlbertlmError:
            return False
        return True


def _sized(meta: tuple[Any, ...], value: list | dict, where: str, kind: str) -> None:
    if NONEMPTY in meta and not value:
        wrong(where, f"a non-empty {kind}", value)
    for keys in (m for m in meta if isinstance(m, Keys)):
        missing = [k for k in keys.names if k not in value]
        if missing:
            needs = f" (needs {', '.join(map(repr, keys.names))})" if len(keys.names) > 1 else ""
            raise AlbertlmError(f"{where}[{missing[0]!r}]: missing entry{needs}")


def _scalar(tp: type, meta: tuple[Any, ...], value: Any, where: str) -> Any:
    if tp not in _NOUNS:
        raise TypeError(f"parse: unsupported type {tp!r} at {where}")
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    ok = {float: number and _finite(value), int: number and isinstance(value, int) and abs(value) <= MAX_INT,
          bool: isinstance(value, bool), str: isinstance(value, str)}[tp]
    bound = next((m for m in meta if isinstance(m, Bound)), Bound())
    if not ok or (number and not bound.holds(value)):
        cap = " (at most 2**53 in magnitude)" if tp is int and number and abs(value) > MAX_INT else ""
        wrong(where, _NOUNS[tp] + str(bound) + cap, value)
    return value


def _finite(x: int | float) -> bool:
    try:
        return math.isfinite(x)
    except OverflowError:  # an int beyond any float
        return False


def at(where: str, name: str) -> str:
    """The path of field `name` of the record at `where`."""
    return f"{where}.{name}" if where else name


def wrong(where: str, expected: str, value: Any, shown: str | None = None) -> typing.NoReturn:
    """Raise `<where>: must be <expected>, got <value>` (its repr or `shown`, shortened to 60 characters)."""
    shown = shown or repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    raise AlbertlmError(f"{where or 'results'}: must be {expected}, got {shown}")
