"""benchmarks/results/INDEX.md: every committed results file, the command that made it and the doc
sections that cite it.

    python -m benchmarks.index            # write INDEX.md
    python -m benchmarks.index --check    # exit 1 when INDEX.md is not what this script writes

The command comes from the file's envelope (`harness.envelope`; a file from before the envelope
read through `harness.read_result`), written as it runs today (`python -m benchmarks.NAME` or
`python -m experiments.NAME`, whichever package holds the script now). A file without one (a
text log, a killed probe) takes the command its citing paragraph in docs/ gives, if one names it.
A doc section cites a file when its text names the file's path, its folder (`benchmarks/results/X/`)
or, in backticks, its name; sections are the headings of docs/*.md, linked with GitHub's anchors.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness import REPO, RESULTS, read_result

INDEX = RESULTS / "INDEX.md"
DOCS = REPO / "docs"
SCRIPT = re.compile(r"^(?:\S*python3?\s+)?(?:-m\s+)?(?:\S*/)?(benchmarks|experiments)[/.](\w+)(?:\.py)?(?=\s|$)")
COMMAND = re.compile(r"`((?:OMP_NUM_THREADS=\d+ )?(?:python3?|albertlm)(?: [^`]*)?)`|^((?:OMP_NUM_THREADS=\d+ )?"
                     r"(?:python3?|albertlm) .*)$", re.MULTILINE)


@dataclass(frozen=True)
class Section:
    """One heading of a doc and the text under it (up to the next heading of any level)."""

    doc: str
    """The doc's path from the repository root, e.g. docs/benchmarks.md."""
    title: str
    anchor: str
    text: str


def current_command(command: str) -> str:
    """A recorded command as it runs today: the script as a module of the package that now holds it."""
    match = SCRIPT.match(command)
    if not match:
        return command
    name = match.group(2)
    package = next((p for p in ("benchmarks", "experiments") if (REPO / p / f"{name}.py").is_file()), match.group(1))
    return f"python -m {package}.{name}" + command[match.end():]


def anchor(title: str, seen: dict[str, int]) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens, repeats numbered."""
    base = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
    n = seen.get(base, 0)
    seen[base] = n + 1
    return base if n == 0 else f"{base}-{n}"


def sections(doc: Path) -> list[Section]:
    """The headings of a markdown file, each with its text; code fences are not headings."""
    out, seen, fence = [], {}, False
    title, tag, lines = None, "", []
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fence = not fence
        heading = None if fence else re.match(r"#{1,6} (.+)", line)
        if heading:
            if title is not None:
                out.append(Section(str(doc.relative_to(REPO)), title, tag, "\n".join(lines)))
            title, tag, lines = heading.group(1).strip(), anchor(heading.group(1), seen), []
        else:
            lines.append(line)
    if title is not None:
        out.append(Section(str(doc.relative_to(REPO)), title, tag, "\n".join(lines)))
    return out


def results_files() -> list[Path]:
    """Every committed results file under benchmarks/results/ but the index, in path order."""
    return sorted(p for p in RESULTS.rglob("*") if p.is_file() and p != INDEX)


def cites(section: Section, path: str) -> bool:
    """Whether a section names the file: its path, its folder (trailing slash) or, in backticks, its name."""
    name, folder = Path(path).name, str(Path(path).parent) + "/"
    return (path in section.text or f"`{name}`" in section.text
            or (folder != "benchmarks/results/" and re.search(re.escape(folder) + r"(?![\w.-])", section.text) is not None))


def recorded_command(path: Path) -> str | None:
    """The command in a results file's envelope (a JSON-lines file: its first line's), if it has one."""
    try:
        if path.suffix == ".json":
            command = read_result(path).get("command")
        elif path.suffix == ".jsonl":
            first = path.read_text(encoding="utf-8").split("\n", 1)[0]
            command = json.loads(first).get("command") if first.strip() else None
        else:
            return None
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        return None
    return command if isinstance(command, str) else None


def documented_command(path: str, citing: list[Section]) -> str | None:
    """The command of the first paragraph of a citing section that names the file and gives a command."""
    for section in citing:
        for paragraph in re.split(r"\n\s*\n", section.text):
            if path in paragraph:
                for quoted, line in COMMAND.findall(paragraph):
                    return " ".join((quoted or line).split())  # a command broken across prose lines, joined
    return None


def render() -> str:
    """The text of INDEX.md."""
    docs = [s for doc in sorted(DOCS.glob("*.md")) for s in sections(doc)]
    rows = []
    for file in results_files():
        path = str(file.relative_to(REPO))
        citing = [s for s in docs if cites(s, path)]
        command = recorded_command(file) or documented_command(path, citing)
        shown = f"`{current_command(command)}`".replace("|", "\\|") if command else "not recorded"
        where = "<br>".join(f"[{s.doc} § {s.title}](../../{s.doc}#{s.anchor})".replace("|", "\\|") for s in citing)
        rows.append(f"| [{file.relative_to(RESULTS)}]({file.relative_to(RESULTS)}) | {shown} | {where or 'not cited'} |")
    return "\n".join([
        "# Results index",
        "",
        "Every results file in this folder, the command that made it and the doc sections that cite it. "
        "Generated by `python -m benchmarks.index` (a test checks it is up to date): edit the docs or the "
        "results, then run it again.",
        "",
        "| file | command | cited in |",
        "|---|---|---|",
        *rows,
    ]) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.index", description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 when INDEX.md is not up to date; write nothing")
    args = p.parse_args(argv)
    text = render()
    if args.check:
        current = INDEX.read_text(encoding="utf-8") if INDEX.exists() else ""
        if current != text:
            print(f"{INDEX.relative_to(REPO)} is out of date: run python -m benchmarks.index", file=sys.stderr)
            return 1
        return 0
    from albertlm.utils import atomic_write_text

    atomic_write_text(INDEX, text)
    print(f"wrote {INDEX.relative_to(REPO)} ({len(results_files())} results files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
