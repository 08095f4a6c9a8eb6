"""Shared fixtures: tiny configs, seeded torch, and the optional folder of real task data
(`shared/data` beside the repository checkout; tests that read it skip without it)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from albertlm.config import get_preset
from albertlm.heads import AlbertForSequenceClassification

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(0)
    yield


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models are fastest on one thread (and do not fight parallel test processes)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


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


def _task(n: int, gen: torch.Generator, length: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    """[CLS] then random ids from 8..127; label 1 when id 7 occurs (planted in half of them)."""
    ids = torch.randint(8, 128, (n, length), generator=gen)
    labels = torch.randint(0, 2, (n,), generator=gen)
    where = torch.randint(1, length, (n,), generator=gen)
    ids[labels.bool(), where[labels.bool()]] = 7
    ids[:, 0] = 2  # [CLS]
    return ids, labels


@pytest.fixture(scope="session")
def trained_classifier() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    """A test-preset classifier trained for a few seconds to ~100% on a learnable task.

    Used by the int8 tests (torch and onnxruntime). A random model's logits for two classes are nearly equal, so its argmax flips under any
    rounding; a trained one has margins well above the int8 error (~1e-2 of the logits).
    """
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model trains fastest on one thread, and shares the CPU
    model = AlbertForSequenceClassification(get_preset("test", classifier_dropout_prob=0.0))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(60):  # the loss is ~0.01 after 50 steps
        ids, labels = _task(32, gen)
        loss = model(ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.set_num_threads(threads)
    ids, labels = _task(256, gen)
    return model.eval(), ids, labels
