"""The joint objective (train/joint.py): the task's loss plus masked LM from the first step."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from albertlm.cli import main
from albertlm.errors import AlbertlmError
from albertlm.train.finetune import FinetuneRecipe, finetune
from albertlm.train.joint import mask_batch
from albertlm.train.metrics import read_metrics
from albertlm.vocab import IGNORE_INDEX, MASK_ID, NUM_SPECIAL, PAD_ID, SpecialIds

from test_finetune import model_dir, write_conll, write_sst  # noqa: F401,E402  (tests/ is on the path; a fixture)


def _batch(rows: int = 8, length: int = 20, vocab: int = 50):
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(NUM_SPECIAL, vocab, (rows, length), generator=gen)
    ids[:, 0], ids[:, -1] = 2, 3  # [CLS] ... [SEP]
    mask = torch.ones_like(ids)
    ids[:4, 12:], mask[:4, 12:] = PAD_ID, 0  # padding on half the rows
    return ids, mask


def test_masking_spares_special_tokens_and_padding_and_repeats_with_its_seed():
    ids, mask = _batch()
    masked, labels = mask_batch(ids, mask, SpecialIds(), 50, 0.3, torch.Generator().manual_seed(0))
    chosen = labels != IGNORE_INDEX
    assert chosen.any() and not chosen[mask == 0].any() and not chosen[:, 0].any() and not chosen[:, -1].any()
    assert torch.equal(labels[chosen], ids[chosen]) and torch.equal(masked[~chosen], ids[~chosen])
    assert (masked[chosen] == MASK_ID).float().mean() > 0.5  # most chosen pieces become [MASK]
    share = chosen.sum() / ((mask == 1) & (ids >= NUM_SPECIAL)).sum()
    assert 0.15 < float(share) < 0.45
    again = mask_batch(ids, mask, SpecialIds(), 50, 0.3, torch.Generator().manual_seed(0))
    assert torch.equal(again[0], masked) and torch.equal(again[1], labels)
    other = mask_batch(ids, mask, SpecialIds(), 50, 0.3, torch.Generator().manual_seed(1))
    assert not torch.equal(other[1], labels)


def test_a_tiny_batch_still_predicts_one_piece():
    ids = torch.tensor([[2, 9, 3]])
    _, labels = mask_batch(ids, torch.ones_like(ids), SpecialIds(), 20, 1e-9, torch.Generator().manual_seed(0))
    assert labels.tolist() == [[IGNORE_INDEX, 9, IGNORE_INDEX]]


@pytest.mark.parametrize("task,writer", [("sst-2", write_sst), ("conll2003", write_conll)])
def test_joint_training_learns_the_task_and_the_language_and_saves_a_plain_head(model_dir, tmp_path, task, writer):
    data = tmp_path / "data"
    data.mkdir()
    writer(data, random.Random(5))
    recipe = FinetuneRecipe(lr=3e-3, batch_size=16, steps=150, warmup_steps=5, log_every=1, eval_every=75,
                            max_seq_length=48, mlm_weight=0.005)
    results = finetune(task, model_dir, data, tmp_path / "joint", recipe, progress=False)
    rows = [r for r in read_metrics(tmp_path / "joint" / "metrics.jsonl") if r["split"] == "train"]
    assert len(rows) == 150 and all("mlm_loss" in r for r in rows)
    mlm = [r["mlm_loss"] for r in rows]
    assert np.mean(mlm[-10:]) < 0.8 * np.mean(mlm[:10])  # the backbone learns the language too
    assert np.mean([r["loss"] for r in rows[-10:]]) < 0.8 * np.mean([r["loss"] for r in rows[:10]])
    plain = finetune(task, model_dir, data, tmp_path / "plain", FinetuneRecipe(**{**recipe.__dict__, "mlm_weight": 0.0}),
                     progress=False)
    joint_keys, plain_keys = (set(load_file(tmp_path / d / "model.safetensors")) for d in ("joint", "plain"))
    assert joint_keys == plain_keys  # the MLM head is training state only
    assert results["recipe"]["mlm_weight"] == 0.005 and plain["recipe"]["mlm_weight"] == 0.0
    assert json.loads((tmp_path / "joint" / "config.json").read_text())["architectures"] == \
        json.loads((tmp_path / "plain" / "config.json").read_text())["architectures"]


def test_the_joint_objective_is_off_by_default_and_changes_the_run_when_on(model_dir, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write_sst(data, random.Random(6))
    base = dict(lr=3e-3, batch_size=16, steps=6, warmup_steps=1, log_every=1, eval_every=6, max_seq_length=48)
    assert FinetuneRecipe().mlm_weight == 0.0
    a = finetune("sst-2", model_dir, data, tmp_path / "a", FinetuneRecipe(**base), progress=False)
    b = finetune("sst-2", model_dir, data, tmp_path / "b", FinetuneRecipe(**base, mlm_weight=0.5), progress=False)
    losses = [[r["loss"] for r in read_metrics(tmp_path / d / "metrics.jsonl") if r["split"] == "train"]
              for d in ("a", "b")]
    assert losses[0][0] == pytest.approx(losses[1][0])  # the same first batch and head: the task loss agrees
    assert losses[0][1:] != losses[1][1:] and a["steps"] == b["steps"] == 6


@pytest.mark.parametrize("flags,message", [
    (["--mlm-weight", "-1"], "mlm_weight must be a finite number, 0 or more, got -1.0"),
    (["--mlm-probability", "1"], "mlm_probability must lie in (0, 1), got 1.0"),
])
def test_bad_joint_settings_are_one_line(model_dir, tmp_path, capsys, flags, message):
    data = tmp_path / "data"
    data.mkdir()
    write_sst(data, random.Random(0))
    code = main(["finetune", "--task", "sst-2", "--model", str(model_dir), "--data", str(data), "--out",
                 str(tmp_path / "out"), "--no-progress", *flags])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err
    with pytest.raises(AlbertlmError, match="mlm_weight must be a finite number"):
        FinetuneRecipe(mlm_weight=float("nan"))  # the command line refuses nan before the recipe sees it
