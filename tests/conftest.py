"""Shared fixtures: tiny configs, seeded torch, and the optional folder of real task data
(`shared/data` beside the repository checkout; tests that read it skip without it)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(0)
    yield


@pytest.fixture
def shared_data() -> Path:
    """The real task data folder, or skip the test when it is absent (a plain clone has none)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"no task data folder at {SHARED_DATA}")
    return SHARED_DATA


def write_story_corpus(path: Path, documents: int) -> Path:
    """A learnable toy corpus: 40 fixed sentences; each document is a run of 8 consecutive ones
    (so the order, and any masked word, can be inferred from context). Written in `lines` format."""
    animals = "cat dog cow horse sheep goat lion bear wolf fox".split()
    places = "field house river hill forest town garden road barn cave".split()
    verbs = "sat ran slept walked stood ate played hid waited looked".split()
    sentences = [f"The {animals[i % 10]} {verbs[(3 * i) % 10]} near the {places[(7 * i) % 10]} number {i}."
                 for i in range(40)]
    docs = ["\n".join(sentences[(d * 7 + k) % 40] for k in range(8)) for d in range(documents)]
    path.write_text("\n\n".join(docs) + "\n")
    return path
