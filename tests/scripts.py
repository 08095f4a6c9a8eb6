"""Loading a script that is not part of any package (the fixture generators) as a module."""

import importlib.util
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def load_script(path: Path) -> ModuleType:
    """The file at `path` (relative paths from the repository root) executed as a fresh module."""
    path = REPO / path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
