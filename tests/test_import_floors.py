"""The floors of the package, read from each module's own import statements (docs: STYLE's import rules).

The data pipeline's own floors are checked beside it (test_corpus, test_masking).
"""

from __future__ import annotations

import ast
from pathlib import Path

import albertlm

PACKAGE = Path(albertlm.__file__).parent


def _modules(*parts: str) -> list[Path]:
    """The module files of a subpackage (or the one module) under src/albertlm."""
    path = PACKAGE.joinpath(*parts)
    return sorted(path.rglob("*.py")) if path.is_dir() else [path.with_suffix(".py")]


def _imports(path: Path) -> list[tuple[str, str | None]]:
    """(imported module, the enclosing function's name or None at module level) for every import."""
    found: list[tuple[str, str | None]] = []

    def visit(node: ast.AST, function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Import):
                found.extend((a.name, function) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.append((child.module, function))
                found.extend((f"{child.module}.{a.name}", function) for a in child.names)
            visit(child, inner)

    visit(ast.parse(path.read_text(encoding="utf-8")), None)
    return found


def _offenders(paths: list[Path], banned: tuple[str, ...], allowed_in: tuple[str, ...] = ()) -> list[str]:
    return [f"{p.relative_to(PACKAGE) if p.is_relative_to(PACKAGE) else p} imports {name}"
            + (f" in {fn}()" if fn else "") for p in paths for name, fn in _imports(p)
            if any(name == b or name.startswith(b + ".") for b in banned) and fn not in allowed_in]


def test_interop_builds_no_model():
    """interop/ holds key tables and file formats; whole checkpoints are built above it (convert.py),
    so model.py and interop/ never import each other's floor in both directions."""
    banned = ("albertlm.model", "albertlm.heads", "albertlm.exit_heads", "albertlm.convert", "albertlm.train",
              "albertlm.inference", "albertlm.cli")
    assert not _offenders(_modules("interop"), banned)


def test_the_network_imports_no_interop():
    """config, model and the heads import nothing from interop/ when loaded; the only calls into it are
    the weight-file delegations (from_pretrained / save_pretrained / load_state_from, the exit heads' side
    file), made at call time as in transformers."""
    network = [*_modules("config"), *_modules("model"), *_modules("heads"), *_modules("exit_heads")]
    assert not _offenders(network, ("albertlm.interop",), allowed_in=("from_pretrained", "save_pretrained",
                                                                       "load_state_from", "load_exit_heads"))
    assert not _offenders(network, ("albertlm.data", "albertlm.train", "albertlm.inference", "albertlm.analysis",
                                    "albertlm.cli", "albertlm.convert", "albertlm.tasks"))


def test_inference_imports_no_training():
    """train/ imports inference/ downward (scoring, loading), never the reverse, at any depth."""
    assert not _offenders(_modules("inference"), ("albertlm.train", "albertlm.cli", "albertlm.analysis"))


def test_the_walker_sees_nested_and_module_level_imports(tmp_path):
    """The checks above can fail: an import inside a function is found, and so is one at module level."""
    sample = tmp_path / "m.py"
    sample.write_text("import albertlm.train.loop\n\ndef f():\n    from albertlm.interop.hf import load_pretrained\n")
    assert _imports(sample) == [("albertlm.train.loop", None), ("albertlm.interop.hf", "f"),
                                ("albertlm.interop.hf.load_pretrained", "f")]
    assert _offenders([sample], ("albertlm.interop",)) and not _offenders([sample], ("albertlm.interop",), ("f",))
