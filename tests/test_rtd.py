"""Replaced-token detection (train/rtd.py) as `albertlm pretrain --token-objective rtd`: the RTD loss
falls, the draws follow the seed and carry no gradient, resume equals the uninterrupted run, 2
processes equal 1, the saved directory is an ordinary ALBERT that finetune and transformers load."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from albertlm.cli import main
from albertlm.config import get_preset
from albertlm.distributed import DistContext
from albertlm.errors import AlbertlmError
from albertlm.model import AlbertModel
from albertlm.train.metrics import read_metrics
from albertlm.train.pretrain import PretrainRecipe, pretrain
from albertlm.train.rtd import TRAINING_STATE_FILE, ReplacedTokenDetection, sample_replacements, sampler_for
from albertlm.vocab import IGNORE_INDEX
from test_pretrain import ARGS, RECIPE, _run_dir, prepared  # noqa: F401  (prepared: the shared data fixture)

RTD = {**RECIPE, "token_objective": "rtd"}


def _train_records(run_dir):
    timing = ("tokens_per_s",)
    return {r["step"]: {k: v for k, v in r.items() if k not in timing}
            for r in read_metrics(run_dir / "metrics.jsonl") if r["split"] == "train"}


@pytest.fixture(scope="module")
def rtd_run(prepared, tmp_path_factory):  # noqa: F811
    """40 steps of the test preset with rtd; the run directory and its summary."""
    _, corpus = prepared
    run = _run_dir(prepared, tmp_path_factory.mktemp("rtd") / "run")
    recipe = PretrainRecipe().with_settings(**{**RTD, "steps": 40, "warmup_steps": 5, "eval_every": 40,
                                               "checkpoint_every": 40}, corpus=corpus)
    return run, pretrain(recipe, run, progress=False)


def test_rtd_run_lowers_the_rtd_loss_and_logs_its_metrics(rtd_run):
    run, summary = rtd_run
    train = _train_records(run)
    for key in ("mlm_loss", "mlm_mask_accuracy", "rtd_loss", "rtd_accuracy", "replaced_share", "sop_loss"):
        assert all(math.isfinite(r[key]) for r in train.values()), key
    assert train[1]["rtd_loss"] == pytest.approx(math.log(2), abs=0.02)  # an untrained head says 1/2 everywhere
    assert sum(train[s]["rtd_loss"] for s in range(36, 41)) / 5 < train[1]["rtd_loss"] - 0.15
    assert 0.5 < train[40]["replaced_share"] <= 1.0
    e = summary["eval"]
    assert e["rtd_loss"] < math.log(2) - 0.15 and 0.0 <= e["rtd_replaced_accuracy"] <= 1.0
    assert e["baseline_rtd_accuracy"] > 0.5 and "mlm_mask_accuracy" in e  # the generator's MLM is scored too
    setup = next(r for r in read_metrics(run / "metrics.jsonl") if r["split"] == "setup")
    assert setup["generator_hidden_size"] == 8  # a quarter of H=32 in whole 8-wide heads
    assert summary["token_objective"] == "rtd"


def test_saved_directory_is_the_discriminator(rtd_run):
    run, _ = rtd_run
    model = run / "model"
    config = json.loads((model / "config.json").read_text())
    assert config["architectures"] == ["AlbertModel"]
    assert config["albertlm_pretraining"]["token_objective"] == "rtd"
    assert not (model / TRAINING_STATE_FILE).exists() and (model / "spiece.model").exists()
    ckpt = run / "checkpoints" / "step-00000040"
    assert TRAINING_STATE_FILE in json.loads((ckpt / "checksums.json").read_text())
    saved, in_ckpt = load_file(model / "model.safetensors"), load_file(ckpt / "model.safetensors")
    assert saved.keys() == in_ckpt.keys() and all(torch.equal(saved[k], in_ckpt[k]) for k in saved)
    head = load_file(ckpt / TRAINING_STATE_FILE)
    assert any(k.startswith("generator.") for k in head) and "rtd.out.weight" in head and "sop.weight" in head
    assert not any(k.startswith("generator.") and ".word." in k for k in head)  # the tables are the model's own


def test_saved_directory_loads_in_finetune_and_transformers(rtd_run, tmp_path, capsys):
    from albertlm.train.finetune import FinetuneRecipe, finetune
    from test_finetune import write_sst

    run, _ = rtd_run
    model = run / "model"
    data = tmp_path / "sst"
    data.mkdir()
    write_sst(data, random.Random(0))
    results = finetune("sst-2", model, data, tmp_path / "out", FinetuneRecipe(steps=3, batch_size=8, max_seq_length=32),
                       progress=False)
    assert results["steps"] == 3 and "accuracy" in results["best"]
    # fill-mask refuses, in one line saying why
    assert main(["fill-mask", "--model", str(model), "the [MASK] sat .", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "replaced-token-detection" in err and "finetune" in err
    transformers = pytest.importorskip("transformers")
    ids = torch.tensor([[2, 10, 11, 12, 13, 3, 14, 15, 3]])
    ours = AlbertModel.from_pretrained(model)(ids).last_hidden_state
    theirs = transformers.AlbertModel.from_pretrained(model).eval()(ids).last_hidden_state
    torch.testing.assert_close(theirs, ours, rtol=1e-5, atol=1e-5)


def _batch(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, 128, (4, 16), generator=g)
    input_ids[:, 0] = 2
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    masked = torch.rand(4, 16, generator=g) < 0.3
    masked[:, 0] = False
    labels[masked] = input_ids[masked]
    input_ids[masked] = 4  # [MASK]
    attention_mask = torch.ones_like(input_ids)
    attention_mask[3, 12:] = 0
    labels[3, 12:] = IGNORE_INDEX
    return {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": torch.zeros_like(input_ids),
            "labels": labels, "sentence_order_label": torch.tensor([0, 1, 0, 1])}


def test_sampling_follows_the_seed_and_carries_no_gradient():
    torch.manual_seed(0)
    model = ReplacedTokenDetection(get_preset("test"), generator_size=0.5)
    batch = _batch()

    def run(seed):
        return model(**batch, samplers=[sampler_for(seed, 0, 0, b) for b in range(4)])

    a, b, other = run(0), run(0), run(1)
    assert torch.equal(a.replaced, b.replaced) and torch.equal(a.rtd_logits, b.rtd_logits)
    assert not torch.equal(a.rtd_logits, other.rtd_logits)  # other draws, other discriminator input
    assert not (a.replaced & (batch["labels"] == IGNORE_INDEX)).any()  # only masked positions can change
    assert a.real.sum() == 4 * 16 - 4
    a.rtd_loss_sum.backward()  # the discriminator's loss reaches no generator weight through the sample
    assert all(p.grad is None for p in model.generator.parameters())
    assert model.discriminator.embeddings.word.weight.grad is not None
    model.zero_grad()
    a.mlm_loss.backward()
    assert all(p.grad is not None for p in model.generator.encoder.parameters())


def test_replacements_follow_the_softmax_and_each_example_its_own_sampler():
    logits = torch.log(torch.tensor([[0.0001, 0.75, 0.25 - 0.0001]])).repeat(4000, 1)  # [N, 3]
    rows = torch.zeros(4000, dtype=torch.long)
    draws = sample_replacements(logits, rows, [sampler_for(7)])
    assert abs(float((draws == 1).float().mean()) - 0.75) < 0.03 and int((draws == 0).sum()) < 10
    # a batch split in two draws what the whole batch draws, row by row
    logits = torch.randn(10, 50)
    rows = torch.tensor([0, 0, 1, 1, 1, 2, 3, 3, 3, 3])
    samplers = lambda: [sampler_for(1, b) for b in range(4)]  # noqa: E731
    whole = sample_replacements(logits, rows, samplers())
    first, second = samplers()[:2], samplers()[2:]
    parts = torch.cat([sample_replacements(logits[:5], rows[:5], first),
                       sample_replacements(logits[5:], rows[5:] - 2, second)])
    assert torch.equal(whole, parts)


def test_rtd_resume_equals_uninterrupted(prepared, tmp_path):  # noqa: F811
    _, corpus = prepared
    recipe = PretrainRecipe().with_settings(**{**RTD, "steps": 6, "checkpoint_every": 3, "eval_every": 6},
                                            corpus=corpus)
    ref = _run_dir(prepared, tmp_path / "ref")
    pretrain(recipe, ref, progress=False)
    run = _run_dir(prepared, tmp_path / "resumed")
    pretrain(recipe, run, progress=False, stop_after=4)  # a checkpoint at 3, step 4 lost
    pretrain(recipe, run, progress=False, resume=True)
    assert _train_records(run) == _train_records(ref)  # every loss, accuracy and replaced share, bitwise
    assert sorted(_train_records(run)) == list(range(1, 7))
    saved, ref_saved = load_file(run / "model" / "model.safetensors"), load_file(ref / "model" / "model.safetensors")
    assert saved.keys() == ref_saved.keys() and all(torch.equal(saved[k], ref_saved[k]) for k in saved)


def test_resume_needs_the_generator_state(prepared, tmp_path):  # noqa: F811
    _, corpus = prepared
    recipe = PretrainRecipe().with_settings(**{**RTD, "steps": 4, "checkpoint_every": 2, "eval_every": 4},
                                            corpus=corpus)
    run = _run_dir(prepared, tmp_path / "run")
    pretrain(recipe, run, progress=False, stop_after=2)
    for ckpt in (run / "checkpoints").glob("step-*"):
        (ckpt / TRAINING_STATE_FILE).unlink()
        sums = json.loads((ckpt / "checksums.json").read_text())
        del sums[TRAINING_STATE_FILE]
        (ckpt / "checksums.json").write_text(json.dumps(sums))
    with pytest.raises(AlbertlmError, match=f"{TRAINING_STATE_FILE}: missing"):
        pretrain(recipe, run, progress=False, resume=True)


@pytest.mark.multiprocess
def test_two_processes_equal_one_with_rtd(prepared, tmp_path):  # noqa: F811
    """FSDP with micro-batches of 2 against one process with micro-batches of 4: each example's draws
    are its own, so the split does not change them."""
    _, corpus = prepared
    one = _run_dir(prepared, tmp_path / "one")
    pretrain(PretrainRecipe().with_settings(**RTD, corpus=corpus, micro_batch_size=4), one, DistContext(),
             progress=False)
    _run_dir(prepared, tmp_path / "two")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "29541",
           "-m", "albertlm.cli", "pretrain", *ARGS, "--token-objective", "rtd", "--corpus", corpus,
           "--out-dir", str(tmp_path), "--name", "two", "--no-progress", "--device", "cpu",
           "--data-parallel", "fsdp", "--micro-batch-size", "2"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    a, b = _train_records(one), _train_records(tmp_path / "two")
    assert a.keys() == b.keys()
    for step in a:
        assert b[step]["replaced_share"] == a[step]["replaced_share"], step  # the same draws
        for key in ("loss", "rtd_loss", "mlm_loss"):
            assert b[step][key] == pytest.approx(a[step][key], rel=1e-5, abs=1e-6), (step, key)
    assert (tmp_path / "two" / "checkpoints" / "step-00000008" / TRAINING_STATE_FILE).exists()


@pytest.mark.parametrize("flag, value", [("--generator-size", "0"), ("--generator-size", "-0.25"),
                                         ("--generator-size", "1.5"), ("--rtd-weight", "-1")])
def test_bad_values_are_refused_naming_the_flag(flag, value, tmp_path, capsys):
    assert main(["pretrain", "--token-objective", "rtd", flag, value, "--out-dir", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and flag in err and value in err
    assert not any(tmp_path.iterdir())  # refused before anything was written
    with pytest.raises(AlbertlmError, match=flag):
        PretrainRecipe(token_objective="rtd", **{flag[2:].replace("-", "_"): float(value)})


def test_recipe_takes_the_rtd_settings():
    recipe = PretrainRecipe().with_settings(token_objective="rtd", generator_size=1.0, rtd_weight=0.0)
    assert (recipe.token_objective, recipe.generator_size, recipe.rtd_weight) == ("rtd", 1.0, 0.0)
    with pytest.raises(AlbertlmError, match="token_objective must be one of mlm, rtd"):
        PretrainRecipe(token_objective="electra")
