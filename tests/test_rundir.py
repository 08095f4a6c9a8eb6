"""Run directories: nothing outside a run is deleted, one run per directory, records survive restarts."""

import json
import subprocess
import sys

import pytest
import torch

from albertlm.checkpoint import resume_checkpoint, verify_checkpoint
from albertlm.cli import main
from albertlm.errors import AlbertlmError
from albertlm.rundir import MARKER, RunLock, check_removable, claim_run_dir, clear_run, validate_run_name
from albertlm.train.metrics import read_metrics
from albertlm.train.pretrain import PretrainRecipe, pretrain
from test_pretrain import ARGS, RECIPE, _losses, _run_dir, prepared  # noqa: F401  (prepared is a fixture)


def _steps(run_dir, split="train"):
    return [r["step"] for r in read_metrics(run_dir / "metrics.jsonl") if r["split"] == split]


@pytest.mark.parametrize("name", [".", "..", "a/b", "/tmp/x", "", "a\\b", "x" * 201])
def test_run_names_must_be_plain(name):
    with pytest.raises(AlbertlmError, match="plain name"):
        validate_run_name(name)


@pytest.mark.parametrize("name", [".", "..", "../victim", "VICTIM_ABS"])
def test_restart_with_a_path_as_name_deletes_nothing(tmp_path, capsys, name):
    out_dir = tmp_path / "runs"
    (out_dir / "other-run").mkdir(parents=True)
    (out_dir / "other-run" / MARKER).write_text("{}")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    name = str(victim) if name == "VICTIM_ABS" else name
    code = main(["pretrain", "--restart", "--name", name, "--out-dir", str(out_dir), "--preset", "test"])
    assert code == 2 and "plain name" in capsys.readouterr().err
    assert (victim / "precious.txt").read_text() == "keep me" and (out_dir / "other-run" / MARKER).exists()


def test_restart_refuses_a_directory_albertlm_did_not_create(tmp_path, capsys):
    target = tmp_path / "runs" / "photos"
    target.mkdir(parents=True)
    (target / "holiday.jpg").write_bytes(b"\xff\xd8")
    code = main(["pretrain", "--restart", "--name", "photos", "--out-dir", str(tmp_path / "runs"), "--preset", "test"])
    err = capsys.readouterr().err
    assert code == 2 and MARKER in err and "not deleting" in err
    assert (target / "holiday.jpg").exists()
    # and a run without --restart refuses to write into it
    with pytest.raises(AlbertlmError, match="holds files albertlm did not write"):
        claim_run_dir(target)
    assert not (target / MARKER).exists()


def test_restart_validates_every_setting_before_deleting(tmp_path, capsys):
    run = tmp_path / "runs" / "r"
    claim_run_dir(run)
    (run / "metrics.jsonl").write_text('{"step": 1, "split": "train"}\n')
    for bad in (["--preset", "no-such-preset"], ["--corpus", str(tmp_path / "missing.txt")], ["--steps", "0"]):
        code = main(["pretrain", "--restart", "--name", "r", "--out-dir", str(tmp_path / "runs"), *bad])
        assert code == 2, bad
        assert (run / "metrics.jsonl").exists(), bad
    assert "no-such-preset" in capsys.readouterr().err


def test_out_dir_that_is_a_file_is_one_line(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["pretrain", "--out-dir", str(f), "--name", "r", "--preset", "test"]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_clear_run_keeps_only_the_marker_and_lock(tmp_path):
    run = tmp_path / "r"
    claim_run_dir(run)
    (run / "checkpoints").mkdir()
    (run / "metrics.jsonl").write_text("{}\n")
    with RunLock(run):
        clear_run(run)
        assert sorted(p.name for p in run.iterdir()) == sorted([MARKER, ".albertlm-lock", ".albertlm-lock.owner"])
    check_removable(tmp_path / "does-not-exist")  # nothing to delete is fine


def test_the_lock_never_writes_through_a_link_named_as_its_owner_file(tmp_path):
    """`.albertlm-lock.owner` is a name albertlm writes in every directory it locks: a link there is
    replaced, and the file it points to is left as it was."""
    mine = tmp_path / "mine.txt"
    mine.write_text("precious\n")
    run = tmp_path / "r"
    run.mkdir()
    (run / ".albertlm-lock.owner").symlink_to(mine)
    with RunLock(run):
        owner = run / ".albertlm-lock.owner"
        assert not owner.is_symlink() and json.loads(owner.read_text())["pid"] > 0
    assert mine.read_text() == "precious\n"


def test_a_second_run_of_the_same_directory_is_refused_at_once(prepared, tmp_path, capsys):
    _, corpus = prepared
    run = _run_dir(prepared, tmp_path / "runs" / "busy")
    # another process holds the run (a real OS lock from a different process)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from albertlm.rundir import RunLock\n"
        f"with RunLock({str(run)!r}):\n    print('locked', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        code = main(["pretrain", *ARGS, "--corpus", corpus, "--out-dir", str(tmp_path / "runs"), "--name", "busy",
                     "--no-progress"])
        err = capsys.readouterr().err
        assert code == 2 and "in use by another run" in err and f"pid {holder.pid}" in err
        assert not (run / "metrics.jsonl").exists()  # the refused run wrote nothing
    finally:
        holder.kill()
        holder.wait()
    # once the holder is gone (however it died), the run proceeds
    assert main(["pretrain", *ARGS, "--corpus", corpus, "--out-dir", str(tmp_path / "runs"), "--name", "busy",
                 "--no-progress"]) == 0
    assert _steps(run) == list(range(1, 9))


def test_a_run_killed_before_its_first_checkpoint_starts_its_log_again(prepared, tmp_path):
    _, corpus = prepared
    recipe = PretrainRecipe().with_settings(**{**RECIPE, "checkpoint_every": 8}, corpus=corpus)
    run = _run_dir(prepared, tmp_path / "run")
    pretrain(recipe, run, progress=False, stop_after=3)
    assert _steps(run) == [1, 2, 3] and not (run / "checkpoints" / "latest").exists()
    pretrain(recipe, run, progress=False, resume=True)
    assert _steps(run) == list(range(1, 9))  # no duplicated records
    assert _steps(run, "setup") == [0]


def _checkpointed_run(prepared, tmp_path, name="run"):
    _, corpus = prepared
    recipe = PretrainRecipe().with_settings(**{**RECIPE, "keep_last": 3}, corpus=corpus)
    run = _run_dir(prepared, tmp_path / name)
    pretrain(recipe, run, progress=False, stop_after=6)  # checkpoints at steps 2, 4, 6
    return recipe, run


def test_latest_naming_a_missing_checkpoint_falls_back_to_the_newest_complete_one(prepared, tmp_path, capsys):
    recipe, run = _checkpointed_run(prepared, tmp_path)
    (run / "checkpoints" / "latest").write_text("step-00000099\n")
    notices = []
    assert resume_checkpoint(run, notices.append).name == "step-00000006"
    assert "not a checkpoint here" in notices[0]
    (run / "checkpoints" / "latest").write_text("")
    assert resume_checkpoint(run, notices.append).name == "step-00000006"
    pretrain(recipe, run, progress=False, resume=True)
    assert "resuming the run" in capsys.readouterr().out and _steps(run) == list(range(1, 9))


def test_a_corrupt_checkpoint_is_skipped_for_the_previous_one(prepared, tmp_path):
    recipe, run = _checkpointed_run(prepared, tmp_path)
    ref = _run_dir(prepared, tmp_path / "ref")
    pretrain(recipe, ref, progress=False)
    newest = run / "checkpoints" / "step-00000006"
    sums = json.loads((newest / "checksums.json").read_text())
    assert set(sums) >= {"model.safetensors", "trainer.json", "optimizer.pt", "config.json"}
    data = bytearray((newest / "model.safetensors").read_bytes())
    data[-5] ^= 0x01  # one flipped bit in the tensor data: safetensors itself would load it
    (newest / "model.safetensors").write_bytes(bytes(data))
    assert "sha256" in verify_checkpoint(newest)
    notices = []
    assert resume_checkpoint(run, notices.append).name == "step-00000004"
    assert "step-00000006" in notices[0]
    pretrain(recipe, run, progress=False, resume=True)
    assert _losses(run) == _losses(ref)  # resumed from step 4, bit for bit


def test_stale_temporaries_of_a_killed_save_are_removed_on_start(prepared, tmp_path, capsys):
    recipe, run = _checkpointed_run(prepared, tmp_path)
    stale = [run / "checkpoints" / ".step-00000008.abc", run / "checkpoints" / ".latest.xyz.tmp"]
    stale[0].mkdir()
    (stale[0] / "model.safetensors").write_bytes(b"\0" * 1000)
    stale[1].write_text("step-00000008\n")
    pretrain(recipe, run, progress=False, resume=True)
    assert not any(p.exists() for p in stale)
    assert "left by an interrupted save" in capsys.readouterr().out


def test_a_rerun_with_other_settings_is_refused_with_saved_and_new_values(prepared, tmp_path, capsys):
    _, corpus = prepared
    recipe = PretrainRecipe().with_settings(**{**RECIPE, "checkpoint_every": 8}, corpus=corpus)
    run = _run_dir(prepared, tmp_path / "runs" / "r")
    pretrain(recipe, run, progress=False, stop_after=2)  # killed before its first checkpoint
    # the tokenizer and data stages are checked even when no checkpoint exists yet

    for change, message in (({"max_seq_length": 32}, "data/ (max_seq_length: saved 64, now 32)"),
                            ({"vocab_size": 80}, "tokenizer/ (vocab_size: saved 64, now 80)"),
                            ({"masked_lm_prob": 0.3}, "masked_lm_prob: saved 0.15, now 0.3")):
        with pytest.raises(AlbertlmError, match="--restart") as exc:
            pretrain(recipe.with_settings(**change), run, progress=False)
        assert message in str(exc.value)
    # through the CLI: recipe.json names every changed setting and the fix
    args = [*ARGS, "--corpus", corpus, "--out-dir", str(tmp_path / "runs"), "--name", "r", "--no-progress"]
    assert main(["pretrain", *args, "--vocab-size", "80"]) == 2
    err = capsys.readouterr().err
    assert "vocab_size: saved 64, now 80" in err and "--restart" in err and "--resume" not in err
    # --restart rebuilds with the new settings
    assert main(["pretrain", *args, "--vocab-size", "80", "--restart"]) == 0
    assert json.loads((run / "recipe.json").read_text())["vocab_size"] == 80


def test_flags_are_typed_from_the_settings_type_hints(capsys):
    from albertlm.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["pretrain", "--curriculum-seq-length", "none", "--sharing", "none", "--lr", "1e-3",
                              "--steps", "10", "--data-seed", "3", "--compile"])
    assert args.curriculum_seq_length is None and args.sharing == "none" and args.lr == 1e-3
    assert args.steps == 10 and args.data_seed == 3 and args.compile is True
    for bad, message in ((["--lr", "nan"], "finite"), (["--lr", "inf"], "finite"), (["--steps", "2.5"], "integer"),
                         (["--batch-size", "x"], "integer")):
        with pytest.raises(SystemExit) as exc:
            parser.parse_args(["pretrain", *bad])
        assert exc.value.code == 2 and message in capsys.readouterr().err
    for bad in ({"lr": float("nan")}, {"steps": 2.5}, {"weight_decay": float("inf")}):
        with pytest.raises(AlbertlmError, match=next(iter(bad))):
            PretrainRecipe().with_settings(**bad)


def test_a_diverged_run_stops_with_an_error_and_writes_no_model(prepared, tmp_path):
    _, corpus = prepared
    run = _run_dir(prepared, tmp_path / "run")
    recipe = PretrainRecipe().with_settings(**{**RECIPE, "lr": 1e38, "checkpoint_every": 8}, corpus=corpus)
    with pytest.raises(AlbertlmError, match="non-finite|not finite"):
        pretrain(recipe, run, progress=False)
    assert not (run / "model").exists() and not (run / "summary.json").exists()


# ---------------------------------------------------------------------------- kills and concurrency (slow)
def _cli_run(prepared, tmp_path, name, env_extra=None, wait=True, extra=()):
    import os

    _, corpus = prepared
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env_extra or {})}
    cmd = [sys.executable, "-m", "albertlm.cli", "pretrain", *ARGS, "--corpus", corpus, "--out-dir", str(tmp_path),
           "--name", name, "--no-progress", "--device", "cpu", *extra]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if not wait:
        return proc
    out = proc.communicate(timeout=300)[0]
    return proc.returncode, out


@pytest.fixture(scope="module")
def reference_losses(prepared, tmp_path_factory):
    root = tmp_path_factory.mktemp("reference")
    _run_dir(prepared, root / "ref")
    code, out = _cli_run(prepared, root, "ref")
    assert code == 0, out
    return _losses(root / "ref")


@pytest.mark.slow
@pytest.mark.parametrize("point", ["checkpoint:written", "checkpoint:renamed", "checkpoint:latest",
                                   "checkpoint:pruned", "model:saved"])
def test_killed_at_every_checkpoint_code_point_resumes_bit_for_bit(prepared, tmp_path, reference_losses, point):
    from albertlm.utils import CRASH_ENV

    run = _run_dir(prepared, tmp_path / "run")
    code, out = _cli_run(prepared, tmp_path, "run", {CRASH_ENV: point})
    assert code == 137, out  # died at the point, like a SIGKILL
    code, out = _cli_run(prepared, tmp_path, "run")
    assert code == 0, out
    assert _losses(run) == reference_losses and _steps(run) == list(range(1, 9))
    assert (run / "model" / "model.safetensors").exists() and (run / "summary.json").exists()
    assert not list((run / "checkpoints").glob(".*"))  # no temporaries left behind


@pytest.mark.slow
def test_a_second_real_run_is_refused_and_the_first_keeps_every_record(prepared, tmp_path):
    import time

    run = _run_dir(prepared, tmp_path / "same")
    longer = ("--steps", "600", "--checkpoint-every", "50")  # still training when the second run starts
    first = _cli_run(prepared, tmp_path, "same", wait=False, extra=longer)
    deadline = time.time() + 120
    while not (run / "metrics.jsonl").exists() and time.time() < deadline:
        time.sleep(0.02)
    code, out = _cli_run(prepared, tmp_path, "same", extra=longer)
    assert code == 2 and "in use by another run" in out
    assert first.poll() is None, "the first run ended before the second started: the test proves nothing"
    assert first.wait(timeout=600) == 0
    assert _steps(run) == list(range(1, 601))  # every record, once
    assert json.loads((run / "summary.json").read_text())["steps"] == 600


def test_pretraining_leaves_the_callers_random_state_alone(prepared, tmp_path):
    _, corpus = prepared
    torch.manual_seed(1234)
    before = torch.get_rng_state()
    pretrain(PretrainRecipe().with_settings(**{**RECIPE, "steps": 2, "eval_every": 2, "checkpoint_every": 2, "dropout": 0.1},
                            corpus=corpus), _run_dir(prepared, tmp_path / "run"), progress=False)
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_processes_with_dropout_killed_and_resumed_bit_for_bit(prepared, tmp_path):
    """Every rank restores its own RNG state: dropout draws on each rank continue exactly."""
    import os

    from albertlm.utils import CRASH_ENV

    _, corpus = prepared

    def torchrun(name, env_extra=None, port=29551):
        env = {**os.environ, "OMP_NUM_THREADS": "1", **(env_extra or {})}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(port),
               "-m", "albertlm.cli", "pretrain", *ARGS, "--corpus", corpus, "--out-dir", str(tmp_path),
               "--name", name, "--no-progress", "--device", "cpu", "--dropout", "0.1"]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)

    _run_dir(prepared, tmp_path / "ref")
    done = torchrun("ref")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    run = _run_dir(prepared, tmp_path / "killed")
    killed = torchrun("killed", {CRASH_ENV: "checkpoint:pruned"}, port=29552)  # dies after step 2's checkpoint
    assert killed.returncode != 0 and (run / "checkpoints" / "latest").read_text().strip() == "step-00000002"
    done = torchrun("killed", port=29553)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert _losses(run) == _losses(tmp_path / "ref") and _steps(run) == list(range(1, 9))
    saved = torch.load(run / "checkpoints" / "step-00000008" / "rng.pt", weights_only=True)
    assert len(saved["ranks"]) == 2 and not torch.equal(saved["ranks"][0]["cpu"], saved["ranks"][1]["cpu"])
