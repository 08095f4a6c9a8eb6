"""Pretraining end to end: a run learns, a killed run resumes bit-for-bit, 2 processes = 1 process."""

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from albertlm.data.corpus import Corpus
from albertlm.data.build import BuildSettings, build_dataset
from albertlm.distributed import DistContext
from albertlm.tokenizer import train_tokenizer
from conftest import write_story_corpus
from albertlm.train.metrics import read_metrics
from albertlm.train.pretrain import PretrainRecipe, pretrain

RECIPE = dict(preset="test", max_seq_length=64, batch_size=8, steps=8, warmup_steps=2, lr=0.01, eval_every=4,
              eval_examples=32, log_every=1, checkpoint_every=2, vocab_size=64, heldout_fraction=0.1,
              precision="fp32", curriculum_steps=0)
ARGS = ["--preset", "test", "--max-seq-length", "64", "--batch-size", "8", "--steps", "8", "--warmup-steps", "2",
        "--lr", "0.01", "--eval-every", "4", "--eval-examples", "32", "--log-every", "1",
        "--checkpoint-every", "2", "--vocab-size", "64", "--heldout-fraction", "0.1", "--precision", "fp32",
        "--curriculum-steps", "0"]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A tokenizer and shards made once, copied into every run directory (prepare_data reuses them)."""
    root = tmp_path_factory.mktemp("prepared")
    corpus = root / "corpus.txt"
    write_story_corpus(corpus, documents=80)
    train_tokenizer(Corpus(str(corpus)).sentences, root / "tokenizer", vocab_size=64, strict=True)
    build_dataset(str(corpus), root / "tokenizer", root / "data",
                  BuildSettings(max_seq_length=64, heldout_fraction=0.1), progress=False)
    return root, str(corpus)


def _run_dir(prepared, path: Path) -> Path:
    root, _ = prepared
    path.mkdir(parents=True)
    shutil.copytree(root / "tokenizer", path / "tokenizer")
    shutil.copytree(root / "data", path / "data")
    return path


def _losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_metrics(run_dir / "metrics.jsonl") if r["split"] == "train"}


def test_run_learns_and_writes_a_loadable_model(prepared, tmp_path):
    _, corpus = prepared
    recipe = PretrainRecipe().with_settings(**{**RECIPE, "steps": 120, "eval_every": 120, "checkpoint_every": 120, "warmup_steps": 10}, corpus=corpus)
    summary = pretrain(recipe, _run_dir(prepared, tmp_path / "run"), progress=False)
    losses = _losses(tmp_path / "run")
    assert sum(losses[s] for s in range(111, 121)) / 10 < losses[1] - 0.5
    assert summary["eval"]["mlm_all_loss"] < math.log(64)  # better than a uniform guess over the vocabulary
    transformers = pytest.importorskip("transformers")
    hf = transformers.AlbertForPreTraining.from_pretrained(tmp_path / "run" / "model")
    assert hf.config.vocab_size == 64
    assert (tmp_path / "run" / "model" / "spiece.model").exists()
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))


def _cli(args, cwd, **kw):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "albertlm.cli", "pretrain", *args, "--no-progress"],
                            cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


@pytest.mark.parametrize("objective", ["mlm", pytest.param("rtd", marks=pytest.mark.slow)])
def test_killed_run_resumes_bit_for_bit(prepared, tmp_path, objective):
    _, corpus = prepared
    args = [*ARGS, "--corpus", corpus, "--out-dir", str(tmp_path), "--device", "cpu", "--token-objective", objective]
    ref_dir = _run_dir(prepared, tmp_path / "ref")
    assert _cli([*args, "--name", "ref"], tmp_path).wait(timeout=300) == 0
    # the same run, killed with SIGKILL once a checkpoint exists, then started again
    run = _run_dir(prepared, tmp_path / "killed")
    proc = _cli([*args, "--name", "killed"], tmp_path)
    latest = run / "checkpoints" / "latest"
    deadline = time.time() + 240
    while not latest.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = latest.read_text().strip()
    assert killed_at.startswith("step-") and not (run / "model").exists(), "the kill came too late to test resume"
    again = _cli([*args, "--name", "killed"], tmp_path)
    out = again.communicate(timeout=300)[0]
    assert again.returncode == 0, out
    assert "resuming" in out
    assert _losses(run) == _losses(ref_dir)  # bitwise: same floats at every step
    assert sorted(_losses(run)) == list(range(1, 9))


@pytest.mark.multiprocess
@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "fsdp-accumulate"])
def test_two_processes_equal_one(prepared, tmp_path, strategy):
    """Also with gradient accumulation under FSDP (micro-batches of 2: the gradient is reduced once per step)."""
    accumulate = strategy.endswith("-accumulate")
    strategy = strategy.removesuffix("-accumulate")
    _, corpus = prepared
    one = _run_dir(prepared, tmp_path / "one")
    pretrain(PretrainRecipe().with_settings(**RECIPE, corpus=corpus), one, DistContext(), progress=False)
    _run_dir(prepared, tmp_path / "two")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-port", str(29531 + (strategy == "fsdp") + 2 * accumulate),
           "-m", "albertlm.cli", "pretrain", *ARGS, "--corpus", corpus, "--out-dir", str(tmp_path), "--name", "two",
           "--no-progress", "--device", "cpu", "--data-parallel", strategy,
           *(["--micro-batch-size", "2"] if accumulate else [])]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    a, b = _losses(one), _losses(tmp_path / "two")
    assert a.keys() == b.keys()
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=1e-5, abs=1e-6), step
    setup = [r for r in read_metrics(tmp_path / "two" / "metrics.jsonl") if r["split"] == "setup"][0]
    assert setup["world_size"] == 2 and setup["allreduce_bytes_per_step"] > 0
    state = json.loads((tmp_path / "two" / "checkpoints" / "step-00000008" / "trainer.json").read_text())
    assert isinstance(state["data"], list) and len(state["data"]) == 2


def test_curriculum_trains_short_examples_first_and_resumes_exactly(prepared, tmp_path):
    _, corpus = prepared
    recipe = PretrainRecipe().with_settings(**{**RECIPE, "steps": 6, "checkpoint_every": 3, "eval_every": 6,
                               "curriculum_seq_length": 16, "curriculum_steps": 3}, corpus=corpus)
    ref = tmp_path / "ref"
    _run_dir(prepared, ref)
    pretrain(recipe, ref, progress=False)
    assert (ref / "data-16" / "meta.json").exists()
    train = {r["step"]: r for r in read_metrics(ref / "metrics.jsonl") if r["split"] == "train"}
    per_step = {s: train[s]["tokens_seen"] - train.get(s - 1, {"tokens_seen": 0})["tokens_seen"] for s in train}
    # 4x as many 16-token examples per step as 64-token ones: about the same token slots, never more
    assert all(per_step[s] <= 8 * 64 for s in per_step)
    assert per_step[1] > 0.5 * per_step[4]
    state = json.loads((ref / "checkpoints" / "step-00000003" / "trainer.json").read_text())
    assert "data_curriculum" in state and state["data_curriculum"]["position"] == 3 * 32
    # stopped after the short phase and resumed: the same losses as the uninterrupted run
    run = tmp_path / "resumed"
    _run_dir(prepared, run)
    pretrain(recipe, run, progress=False, stop_after=4)
    pretrain(recipe, run, progress=False, resume=True)
    assert _losses(run) == _losses(ref)


def test_the_summary_reports_no_sentence_accuracy_without_a_sentence_objective():
    from albertlm.train.pretrain import format_summary

    e = {"mlm_mask_accuracy": 0.1, "baseline_unigram_accuracy": 0.04, "baseline_bigram_accuracy": 0.1,
         "mlm_mask_loss": 5.0, "mask_distinct_predictions": 9, "mlm_kept_accuracy": 0.5, "mlm_random_accuracy": 0.0,
         "mlm_all_accuracy": 0.2, "sop_accuracy": 1.0, "baseline_sop_accuracy": 1.0, "examples": 647}
    summary = {"steps": 2, "tokens_seen": 10, "train_seconds": 1.0, "tokens_per_s": 10.0, "parameters": 5,
               "eval": e, "run_dir": "r"}
    none = format_summary(summary, "none")
    assert "SOP accuracy" not in none and "no sentence-level objective (objective none); 647" in none
    assert "held-out SOP accuracy 100.0%" in format_summary(summary, "sop")
    assert "held-out NSP accuracy" in format_summary(summary, "nsp")


def test_a_run_without_a_sentence_objective_says_so_at_the_end(tmp_path, capsys):
    from albertlm.cli import main

    corpus = tmp_path / "c.txt"
    corpus.write_text("\n\n".join("\n".join(f"line {d} {i} of the story ." for i in range(6)) for d in range(60)) + "\n")
    assert main(["pretrain", "--preset", "test", "--corpus", str(corpus), "--out-dir", str(tmp_path / "runs"),
                 "--objective", "none", "--heldout-fraction", "0.2", "--steps", "2", "--warmup-steps", "1", "--eval-every", "2", "--vocab-size",
                 "60", "--workers", "1", "--no-progress", "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert "no sentence-level objective (objective none)" in printed and "SOP accuracy" not in printed
