"""Output directories and files: every command that writes a directory claims it (a marker), refuses one
that holds anything it would not write, holds a lock while it writes, never writes over one of its
inputs, and writes every file atomically with the mode the umask gives."""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

from albertlm import AlbertConfig, AlbertForPreTraining
from albertlm.cli import main
from albertlm.outputs import FINETUNE_FILES, OUT_MARKER, OutputDir, check_not_input
from albertlm.rundir import MARKER, RunLock
from albertlm.tokenizer import Tokenizer, train_tokenizer
from albertlm.utils import atomic_write_text, replace_directory
from test_finetune import _corpus, write_sst

FT_ARGS = ["--steps", "4", "--batch-size", "16", "--eval-every", "4", "--max-seq-length", "32", "--no-progress",
           "--device", "cpu"]


@pytest.fixture(scope="module")
def base(tmp_path_factory, one_thread) -> Path:
    """A tiny random AlbertForPreTraining with a ~100-piece vocabulary."""
    path = tmp_path_factory.mktemp("base")
    train_tokenizer(_corpus(), path, vocab_size=100, log=lambda msg: None)
    config = AlbertConfig(vocab_size=Tokenizer.load(path).vocab_size, embedding_size=16, hidden_size=32,
                          num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    AlbertForPreTraining(config).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def sst(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sst")
    write_sst(path, random.Random(0))
    return path


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory, base, sst) -> Path:
    out = tmp_path_factory.mktemp("ft") / "out"
    assert main(["finetune", "--task", "sst-2", "--model", str(base), "--data", str(sst), "--out", str(out),
                 *FT_ARGS]) == 0
    return out


def _snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _users_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "notes.txt").write_text("mine\n")
    (path / "metrics.jsonl").write_text('{"my": "log"}\n')
    (path / "recipe.json").write_text('{"mine": true}\n')
    (path / "results.json").write_text("mine\n")
    return path


def _one_line_error(capsys, *needles: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


# ---------------------------------------------------------------------------- finetune and distill
def test_finetune_refuses_a_users_directory_and_changes_nothing(tmp_path, base, sst, capsys):
    out = _users_dir(tmp_path / "u1")
    before = _snapshot(out)
    assert main(["finetune", "--task", "sst-2", "--model", str(base), "--data", str(sst), "--out", str(out),
                 *FT_ARGS]) == 2
    _one_line_error(capsys, "holds files albertlm did not write", "metrics.jsonl")
    assert _snapshot(out) == before and sorted(p.name for p in out.iterdir()) == sorted(before)


def test_distill_refuses_a_users_directory_and_changes_nothing(tmp_path, finetuned, sst, capsys):
    out = _users_dir(tmp_path / "u24")
    before = _snapshot(out)
    assert main(["distill", "--teacher", str(finetuned), "--student", "test", "--task", "sst-2", "--data", str(sst),
                 "--out", str(out), *FT_ARGS]) == 2
    _one_line_error(capsys, "holds files albertlm did not write")
    assert _snapshot(out) == before


def test_the_distillation_benchmark_reuses_a_teacher_cache_in_a_new_directory(tmp_path, finetuned, sst):
    """benchmarks.distill copies the first run's logit cache into each later run's new --out: that
    directory must still be one distill takes as its own."""
    from albertlm.train.distill import TEACHER_CACHE, distill
    from albertlm.train.finetune import FinetuneRecipe
    from benchmarks import distill as bench
    recipe = FinetuneRecipe(steps=2, batch_size=16, eval_every=2, max_seq_length=32)
    first = distill("sst-2", finetuned, "test", sst, tmp_path / "a", recipe, progress=False, device="cpu")
    assert not first["distillation"]["teacher_logits_cached"]
    bench.seed_cache(tmp_path / "a" / TEACHER_CACHE, tmp_path / "b")
    second = distill("sst-2", finetuned, "test", sst, tmp_path / "b", recipe, progress=False, device="cpu")
    assert second["distillation"]["teacher_logits_cached"]


def test_distill_never_writes_over_its_unlabelled_text(tmp_path, finetuned, sst, capsys):
    """--unlabelled is an input too: inside --out under a name distill writes, it would be replaced."""
    out = tmp_path / "d"
    OutputDir(out, "distill", FINETUNE_FILES).claim().__exit__(None, None, None)  # an earlier distill's directory
    text = out / "predictions_dev.tsv"
    text.write_text("a good film\nan awful film\n")
    assert main(["distill", "--teacher", str(finetuned), "--student", "test", "--task", "sst-2", "--data", str(sst),
                 "--out", str(out), "--unlabelled", str(text), *FT_ARGS]) == 2
    _one_line_error(capsys, "holds the --unlabelled input")
    assert text.read_text() == "a good film\nan awful film\n"


def test_finetune_into_a_pretraining_run_directory_is_refused(tmp_path, base, sst, capsys):
    run = tmp_path / "prun"
    shutil.copytree(base, run / "model")
    (run / MARKER).write_text("{}\n")
    (run / "metrics.jsonl").write_text("".join(f'{{"step": {i}}}\n' for i in range(5)))
    (run / "recipe.json").write_text('{"preset": "test"}\n')
    before = _snapshot(run)
    assert main(["finetune", "--task", "sst-2", "--model", str(base), "--data", str(sst), "--out", str(run),
                 *FT_ARGS]) == 2
    _one_line_error(capsys, "pretrain run directory")
    assert main(["finetune", "--task", "sst-2", "--model", str(run / "model"), "--data", str(sst), "--out", str(run),
                 *FT_ARGS]) == 2
    _one_line_error(capsys, "holds the --model input")
    assert _snapshot(run) == before


def test_a_rerun_replaces_its_own_outputs_but_not_a_file_added_since(tmp_path, base, sst, capsys):
    out = tmp_path / "ft"
    args = ["finetune", "--task", "sst-2", "--model", str(base), "--data", str(sst), "--out", str(out), *FT_ARGS]
    assert main(args) == 0
    assert json.loads((out / OUT_MARKER).read_text())["command"] == "finetune"
    assert main(args) == 0  # its own directory: replaced
    (out / "thesis.tex").write_text("t\n")
    assert main(args) == 2
    _one_line_error(capsys, "did not write", "thesis.tex")
    assert (out / "thesis.tex").read_text() == "t\n"
    # another command's directory is refused too
    assert main(["tokenizer", "train", "--input", str(sst / "train.tsv"), "--vocab-size", "60", "--out", str(out)]) == 2
    _one_line_error(capsys, "written by albertlm finetune")


def test_a_rerun_that_stops_early_leaves_none_of_the_earlier_runs_results(tmp_path, base, sst, monkeypatch, capsys):
    """A rerun into its own output replaces it: stopped before its end, it must not leave the earlier
    run's results.json and best model beside its own recipe.json, nor TensorBoard curves of both runs."""
    import albertlm.train.finetune as finetune_module

    out = tmp_path / "again"
    args = ["finetune", "--task", "sst-2", "--model", str(base), "--data", str(sst), "--out", str(out), *FT_ARGS]
    assert main([*args, "--seed", "1"]) == 0
    (out / "tensorboard" / "mine.txt").write_text("t\n")  # files of the user's stay
    (out / "predictions_test.tsv").write_text("albertlm predict wrote this\n")

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(finetune_module, "run_steps", interrupted)
    assert main([*args, "--seed", "2"]) == 130
    assert json.loads((out / "recipe.json").read_text())["seed"] == 2
    left = sorted(p.name for p in out.iterdir() if not p.name.startswith(".albertlm"))
    assert left == ["metrics.jsonl", "predictions_test.tsv", "recipe.json", "tensorboard"], left
    assert len(list((out / "tensorboard").glob("events.out.tfevents.*"))) == 1  # this run's own
    assert (out / "tensorboard" / "mine.txt").read_text() == "t\n"


@pytest.mark.parametrize("layout", ["metrics-dir", "tensorboard-file", "model-dir"])
def test_finetune_refuses_an_output_with_our_names_in_the_wrong_kind(tmp_path, base, sst, capsys, layout):
    out = tmp_path / "o"
    out.mkdir()
    {"metrics-dir": lambda: (out / "metrics.jsonl").mkdir(), "tensorboard-file": lambda: (out / "tensorboard").write_text("x"),
     "model-dir": lambda: (out / "model.safetensors").mkdir()}[layout]()
    before = sorted(p.name for p in out.iterdir())
    assert main(["finetune", "--task", "sst-2", "--model", str(base), "--data", str(sst), "--out", str(out),
                 *FT_ARGS]) == 2
    _one_line_error(capsys, "holds files albertlm did not write")
    assert sorted(p.name for p in out.iterdir()) == before


def test_an_output_on_a_read_only_file_system_is_one_line(tmp_path, base, sst, capsys, monkeypatch):
    real_mkdir = Path.mkdir

    def read_only(self, *args, **kwargs):
        if self.name == "ro-out":
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)
    assert main(["finetune", "--task", "sst-2", "--model", str(base), "--data", str(sst), "--out",
                 str(tmp_path / "ro-out"), *FT_ARGS]) == 2
    _one_line_error(capsys, "ro-out", "Read-only file system", "writable")


def test_a_second_finetune_into_a_held_directory_is_refused_at_once(tmp_path, base, sst, capsys):
    out = tmp_path / "held"
    out.mkdir()
    with RunLock(out):  # what a first run holds for as long as it writes
        assert main(["finetune", "--task", "sst-2", "--model", str(base), "--data", str(sst), "--out", str(out),
                     *FT_ARGS]) == 2
    _one_line_error(capsys, "in use by another run", "choose another --out")
    assert not (out / "metrics.jsonl").exists()


def test_a_second_real_finetune_is_refused_and_the_first_keeps_every_record(tmp_path, base, sst, capsys):
    out = tmp_path / "cc2"
    first = subprocess.Popen(
        [sys.executable, "-m", "albertlm.cli", "finetune", "--task", "sst-2", "--model", str(base), "--data", str(sst),
         "--out", str(out), "--steps", "300", "--batch-size", "16", "--eval-every", "20", "--max-seq-length", "32",
         "--no-progress", "--device", "cpu", "--seed", "1", "--lr", "3e-3"],
        env={**os.environ, "OMP_NUM_THREADS": "1"}, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (out / "metrics.jsonl").exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert first.poll() is None, first.stderr.read()
        code = main(["finetune", "--task", "sst-2", "--model", str(base), "--data", str(sst), "--out", str(out),
                     "--steps", "4", "--batch-size", "16", "--no-progress", "--device", "cpu", "--seed", "2",
                     "--lr", "1e-5"])
        assert first.wait(timeout=300) == 0, first.stderr.read()
    finally:
        if first.poll() is None:
            first.kill()
    assert code == 2
    _one_line_error(capsys, "in use by another run")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if r["split"] == "eval"]
    assert records[0]["split"] == "setup" and records[0]["lr"] == 3e-3 and records[0]["seed"] == 1
    assert [r["step"] for r in evals] == list(range(20, 301, 20))  # every evaluation of the first run, none other
    results = json.loads((out / "results.json").read_text())
    assert results["recipe"]["seed"] == 1
    assert main(["evaluate", "--model", str(out), "--data", str(sst), "--device", "cpu"]) == 0
    scored = capsys.readouterr().out
    assert f"{100 * results['best']['accuracy']:.2f}" in scored  # the directory holds the model the run reported


# ---------------------------------------------------------------------------- report and tokenizer train
def _small_corpus(tmp_path: Path) -> Path:
    path = tmp_path / "small.txt"
    path.write_text("\n\n".join("\n".join(f"line {d} {i} of the story ." for i in range(8)) for d in range(30)) + "\n")
    return path


def test_report_refuses_a_users_directory_before_any_work(tmp_path, capsys):
    out = tmp_path / "rq"
    (out / "study").mkdir(parents=True)
    (out / "study" / "thesis.tex").write_text("t\n")
    (out / "report.log").write_text("my log\n")
    before = _snapshot(out)
    assert main(["report", "--quick", "--out", str(out), "--threads", "1", "--steps", "2", "--seeds", "1",
                 "--corpus", str(_small_corpus(tmp_path))]) == 2
    _one_line_error(capsys, "holds files albertlm did not write")
    assert _snapshot(out) == before


def test_report_never_replaces_a_study_directory_holding_other_files(tmp_path, monkeypatch, capsys):
    import albertlm.analysis.report as report

    out = tmp_path / "rq2"
    OutputDir(out, "report", report.REPORT_FILES).claim().__exit__(None, None, None)  # an earlier report's directory
    (out / "study" / "runs").mkdir(parents=True)
    (out / "study" / "thesis.tex").write_text("t\n")
    monkeypatch.setattr(report, "_run_report", lambda *a, **k: pytest.fail("the report ran"))
    assert main(["report", "--quick", "--out", str(out), "--threads", "1", "--steps", "2", "--seeds", "1",
                 "--corpus", str(_small_corpus(tmp_path))]) == 2
    _one_line_error(capsys, "study", "thesis.tex")
    assert (out / "study" / "thesis.tex").read_text() == "t\n"


@pytest.mark.parametrize("where", ["runs/notes.txt", "runs/e16-all-s0/thesis.tex", "shared/sop/mine.csv"])
def test_report_never_replaces_a_study_holding_a_file_deeper_down(tmp_path, monkeypatch, capsys, where):
    """study/ is deleted as a whole: a user's file in runs/, in one run or in shared/ is refused too."""
    import albertlm.analysis.report as report

    out = tmp_path / "rq3"
    OutputDir(out, "report", report.REPORT_FILES).claim().__exit__(None, None, None)
    for run in ("runs/e16-all-s0", "shared/sop"):  # what the study writes: pretraining directories
        (out / "study" / run / "model").mkdir(parents=True)
        (out / "study" / run / MARKER).write_text("{}\n")
    (out / "study" / where).write_text("t\n")
    monkeypatch.setattr(report, "_run_report", lambda *a, **k: pytest.fail("the report ran"))
    assert main(["report", "--quick", "--out", str(out), "--threads", "1", "--steps", "2", "--seeds", "1",
                 "--corpus", str(_small_corpus(tmp_path))]) == 2
    _one_line_error(capsys, "holds files the study did not write", where)
    assert (out / "study" / where).read_text() == "t\n"


def _committed_report(tmp_path: Path) -> Path:
    out = tmp_path / "r"
    out.mkdir()
    shutil.copy(Path(__file__).resolve().parents[1] / "docs" / "report" / "results.json", out)
    (out / "report.md").write_text("my edit\n")
    return out


def test_render_on_a_full_disk_leaves_report_md_as_it_was(tmp_path, monkeypatch, capsys):
    out = _committed_report(tmp_path)
    real = Path.write_text

    def full_disk(self, text, *args, **kwargs):
        if self.name.startswith(".report.md."):
            real(self, text[:4096], *args, **kwargs)
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full_disk)
    assert main(["report", "--render", "--out", str(out)]) == 2
    _one_line_error(capsys, "no space left", "intact")
    assert (out / "report.md").read_text() == "my edit\n"
    assert sorted(p.name for p in out.iterdir()) == ["report.md", "results.json"]  # no temporary left


@pytest.mark.parametrize("named", [None, "temporary"])
def test_a_full_disk_names_the_file_not_its_temporary(tmp_path, monkeypatch, capsys, named):
    """The kernel's write() error names no file, open()'s names the temporary: either way the line
    names report.md, the file the user asked for."""
    out = _committed_report(tmp_path)
    real = Path.write_text

    def full_disk(self, text, *args, **kwargs):
        if self.name.startswith(".report.md."):
            raise OSError(errno.ENOSPC, "No space left on device", *([str(self)] if named else []))
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full_disk)
    assert main(["report", "--render", "--out", str(out)]) == 2
    _one_line_error(capsys, f"no space left on the device writing {out / 'report.md'}; ")
    assert sorted(p.name for p in out.iterdir()) == ["report.md", "results.json"]


def test_an_os_error_with_only_a_message_keeps_it_on_one_line(monkeypatch, capsys):
    """Libraries raise OSError("text") (no errno, no strerror): the line must carry the text, not "OSError"."""
    import albertlm.analysis.report as report

    def fails(out_dir):
        raise OSError("cannot identify image file 'speed.png'\nsecond line")

    monkeypatch.setattr(report, "render_results", fails)
    assert main(["report", "--render", "--out", "x"]) == 2
    _one_line_error(capsys, "error: cannot identify image file 'speed.png' second line")
    monkeypatch.setattr(report, "render_results", lambda out: (_ for _ in ()).throw(
        OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), "x/report.md")))
    assert main(["report", "--render", "--out", "x"]) == 2
    _one_line_error(capsys, "disk quota exceeded writing x/report.md", "intact")


def test_render_into_a_directory_named_report_md_is_one_line(tmp_path, capsys):
    out = _committed_report(tmp_path)
    (out / "report.md").unlink()
    (out / "report.md").mkdir()
    assert main(["report", "--render", "--out", str(out)]) == 2
    _one_line_error(capsys, "report.md", "a directory")


def test_a_figure_is_written_atomically_and_never_through_a_link(tmp_path):
    """A report directory may hold any *.png: a figure's name that is a link to a file elsewhere is
    replaced by the figure, and the file it pointed to is left as it was."""
    from albertlm.analysis.figures import plot_curves

    mine = tmp_path / "mine.png"
    mine.write_bytes(b"my picture")
    out = tmp_path / "report"
    out.mkdir()
    (out / "training_curves.png").symlink_to(mine)
    plot_curves({"run": [(1, 2.0), (2, 1.5)]}, out / "training_curves.png")
    assert mine.read_bytes() == b"my picture"
    figure = out / "training_curves.png"
    assert not figure.is_symlink() and figure.read_bytes().startswith(b"\x89PNG")
    assert sorted(p.name for p in out.iterdir()) == ["training_curves.png"]


def test_tokenizer_train_refuses_to_replace_a_vocabulary_it_did_not_write(tmp_path, base, sst, capsys):
    out = tmp_path / "utk"
    out.mkdir()
    shutil.copy(base / "spiece.model", out)
    before = _snapshot(out)
    args = ["tokenizer", "train", "--input", str(sst / "train.tsv"), "--vocab-size", "60", "--out", str(out)]
    assert main(args) == 2
    _one_line_error(capsys, "holds files albertlm did not write", "spiece.model")
    assert _snapshot(out) == before
    fresh = tmp_path / "tok"
    args[-1] = str(fresh)
    assert main(args) == 0 and main(args) == 0  # a new directory, then its own again
    assert json.loads((fresh / OUT_MARKER).read_text())["command"] == "tokenizer train"


# ---------------------------------------------------------------------------- outputs that are inputs
def test_evaluate_never_writes_predictions_over_the_models_files(tmp_path, finetuned, sst, capsys):
    model = tmp_path / "ev1"
    shutil.copytree(finetuned, model)
    before = _snapshot(model)
    for name in ("model.safetensors", "config.json"):
        assert main(["evaluate", "--model", str(model), "--data", str(sst), "--device", "cpu", "--predictions",
                     str(model / name)]) == 2
        _one_line_error(capsys, "overwrite its own input")
    link = tmp_path / "link.txt"
    link.symlink_to(model / "spiece.model")  # through a symlink too
    assert main(["evaluate", "--model", str(model), "--data", str(sst), "--device", "cpu", "--predictions",
                 str(link)]) == 2
    _one_line_error(capsys, "overwrite its own input")
    assert _snapshot(model) == before
    assert main(["evaluate", "--model", str(model), "--data", str(sst), "--device", "cpu", "--predictions",
                 str(model / "dev-predictions.tsv")]) == 0  # a new file beside the model is fine


@pytest.mark.parametrize("name", ["model.safetensors", "config.json"])
def test_export_never_writes_over_the_models_files(tmp_path, finetuned, capsys, name):
    model = tmp_path / "m06"
    shutil.copytree(finetuned, model)
    before = _snapshot(model)
    assert main(["export", "--format", "onnx", str(model), str(model / name), "--exporter", "legacy"]) == 2
    _one_line_error(capsys, "overwrite its own input")
    assert _snapshot(model) == before


def test_check_not_input_rules(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    check_not_input(model / "new.onnx", "OUT", {"DIR": model})  # a new file inside an input directory
    check_not_input(model / "sub", "--out", {"--model": model})  # a directory inside one
    for out in (model, model / "config.json", tmp_path):
        with pytest.raises(Exception, match="overwrite its own input"):
            check_not_input(out, "OUT", {"DIR": model})


# ---------------------------------------------------------------------------- the atomic writer
def test_files_get_the_umasks_mode_and_another_user_can_read_the_model(finetuned):
    from albertlm.heads import AlbertForSequenceClassification

    shared = Path(tempfile.mkdtemp())  # in /tmp itself: pytest's own folders are 0700, no other user gets in
    old = os.umask(0o022)
    try:
        os.chmod(shared, 0o755)
        model = shared / "model"
        AlbertForSequenceClassification.from_pretrained(finetuned).save_pretrained(model)
        Tokenizer.load(finetuned).save(model)
        atomic_write_text(model / "notes.txt", "x")
        modes = {p.name: p.stat().st_mode & 0o777 for p in model.iterdir()}
        assert set(modes.values()) == {0o644}, modes
        assert model.stat().st_mode & 0o777 == 0o755
        os.umask(0o077)
        atomic_write_text(model / "private.txt", "x")
        assert (model / "private.txt").stat().st_mode & 0o777 == 0o600
        os.umask(0o022)
        if os.getuid() != 0:
            pytest.skip("reading as another user needs root to switch users")
        code = ("import os, sys; from pathlib import Path; os.setgroups([]); os.setgid(65534); os.setuid(65534); "
                "d = Path(sys.argv[1]); [open(d / n, 'rb').read() for n in ('config.json', 'model.safetensors', "
                "'spiece.model')]")  # the interpreter starts as root, then becomes nobody before it reads
        done = subprocess.run([sys.executable, "-c", code, str(model)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    finally:
        os.umask(old)
        shutil.rmtree(shared)


def test_replace_directory_swaps_a_whole_directory(tmp_path):
    dst, new = tmp_path / "dst", tmp_path / "new"
    dst.mkdir()
    (dst / "old.txt").write_text("old")
    new.mkdir()
    (new / "config.json").write_text("new")
    replace_directory(new, dst)
    assert sorted(p.name for p in dst.iterdir()) == ["config.json"] and not new.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dst"]


def test_replace_directory_without_an_atomic_exchange_puts_the_old_one_back_on_failure(tmp_path, monkeypatch):
    """Where renameat2 cannot exchange (another OS, some file systems), DST is moved aside and the new
    directory renamed in; if that rename fails, DST must be back where it was, not left aside."""
    import albertlm.utils as utils

    monkeypatch.setattr(utils, "_exchange", lambda a, b: False)
    dst, new = tmp_path / "dst", tmp_path / "new"
    for d, name in ((dst, "old.txt"), (new, "config.json")):
        d.mkdir()
        (d / name).write_text(name)
    real = os.replace

    def fails_for_new(src, target):
        if Path(src) == new:
            raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), str(target))
        real(src, target)

    monkeypatch.setattr(os, "replace", fails_for_new)
    with pytest.raises(OSError):
        replace_directory(new, dst)
    assert (dst / "old.txt").read_text() == "old.txt" and (new / "config.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dst", "new"]
    monkeypatch.setattr(os, "replace", real)
    replace_directory(new, dst)
    assert sorted(p.name for p in dst.iterdir()) == ["config.json"] and not new.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dst"]


# ---------------------------------------------------------------------------- pretrain's names and defaults
def test_pretrain_refuses_an_empty_name(tmp_path, capsys):
    assert main(["pretrain", "--preset", "test", "--corpus", str(_small_corpus(tmp_path)), "--out-dir",
                 str(tmp_path / "runs"), "--name", "", "--restart"]) == 2
    _one_line_error(capsys, "--name ''", "plain name")
    assert not (tmp_path / "runs").exists()


def test_a_shorter_run_keeps_the_recipes_share_of_curriculum_steps():
    from albertlm.cli import build_parser, pretrain_recipe

    recipe = pretrain_recipe(build_parser().parse_args(["pretrain", "--steps", "600"]))
    assert (recipe.steps, recipe.curriculum_steps) == (600, 171)  # 1,000 of 3,500 in the quick recipe
    recipe = pretrain_recipe(build_parser().parse_args(["pretrain", "--steps", "600", "--curriculum-steps", "50"]))
    assert recipe.curriculum_steps == 50
    with pytest.raises(Exception, match="--curriculum-steps sets it"):
        pretrain_recipe(build_parser().parse_args(["pretrain", "--steps", "600", "--curriculum-steps", "700"]))
