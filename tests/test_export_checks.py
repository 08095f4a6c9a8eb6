"""`albertlm export`'s refusals and its stderr: a read-only OUT, an `architectures` field that is not a
list of class names, and an int8 export that prints nothing but its result."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from albertlm.cli import main
from albertlm.config import get_preset
from albertlm.heads import AlbertForSequenceClassification, AlbertForTokenClassification

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def classifier(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("sst") / "model"
    AlbertForSequenceClassification(get_preset("test", num_hidden_layers=2)).save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def tagger(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("ner") / "model"
    AlbertForTokenClassification(get_preset("test", num_hidden_layers=2, num_labels=3)).save_pretrained(d)
    return d


def _one_line(capsys, *argv) -> str:
    assert main(["export", *map(str, argv)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("int8", [False, True])
def test_a_read_only_out_is_one_line_naming_it(int8, classifier, tmp_path, monkeypatch, capsys):
    """EX04 (tests run as root, where chmod does not stop writes: mkdir beside OUT raises EROFS)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    real = os.mkdir

    def mkdir(path, mode=0o777, *args, **kwargs):
        if Path(os.fsdecode(path)).parent == ro:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    out = ro / "x.onnx"
    err = _one_line(capsys, classifier, out, "--exporter", "legacy", *(["--int8"] if int8 else []))
    assert f"{out}: Read-only file system: choose an output on a writable file system" in err
    assert not os.listdir(ro)


@pytest.mark.parametrize("int8", [False, True])
def test_the_exported_file_is_flushed_with_its_directory(int8, classifier, tmp_path, monkeypatch):
    """Renamed into place without an fsync of the file and of its directory, a power cut can leave
    an empty OUT or none at all after export said it wrote it."""
    import albertlm.utils as utils

    synced, real_fsync = [], os.fsync
    monkeypatch.setattr(utils, "fsync_directory", lambda path: synced.append(Path(path)))
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(os.fstat(fd).st_ino) or real_fsync(fd))
    out = tmp_path / "m.onnx"
    assert main(["export", str(classifier), str(out), "--exporter", "legacy", *(["--int8"] if int8 else [])]) == 0
    assert synced[-2:] == [out.stat().st_ino, tmp_path]  # the file, then its directory
    assert out.stat().st_mode & 0o777 == 0o666 & ~utils.current_umask()


@pytest.mark.parametrize("value", ["AlbertForSequenceClassification", [{"a": 1}], [""], [7]])
def test_architectures_must_be_a_list_of_class_names(value, classifier, tmp_path, capsys):
    """EX10 (a string: its first letter was taken, "holds an A") / EX11 (objects: a TypeError)."""
    d = tmp_path / "model"
    d.mkdir()
    for p in classifier.iterdir():
        (d / p.name).write_bytes(p.read_bytes())
    config = json.loads((d / "config.json").read_text())
    config["architectures"] = value
    (d / "config.json").write_text(json.dumps(config))
    err = _one_line(capsys, d, tmp_path / "m.onnx", "--exporter", "legacy")
    assert f"{d / 'config.json'}: architectures must be a list of class names" in err
    assert not (tmp_path / "m.onnx").exists()


def _export_stderr(model: Path, out: Path, *flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "albertlm.cli", "export", str(model), str(out), "--int8", *flags],
                          capture_output=True, text=True, env=env, timeout=300)


def test_an_int8_export_prints_only_its_result(tagger, tmp_path):
    """EX15: onnxruntime's quantizer logged advice on every run ("consider to run pre-processing")."""
    done = _export_stderr(tagger, tmp_path / "ner8.onnx", "--exporter", "legacy")
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and "int8 MatMuls" in done.stdout


@pytest.mark.slow
def test_the_current_exporter_prints_only_its_result(tagger, tmp_path):
    """EX15 with the default exporter: torch's notes about torchvision, its pytree deprecation and the
    shared batch and sequence axes are silenced too."""
    done = _export_stderr(tagger, tmp_path / "ner8.onnx")
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and "int8 MatMuls" in done.stdout


def test_a_directory_claiming_a_head_its_weights_lack_is_not_exported(tmp_path, capsys):
    from albertlm.model import AlbertForPreTraining

    model = tmp_path / "pretrained"
    AlbertForPreTraining(get_preset("test")).save_pretrained(model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "architectures": ["AlbertForSequenceClassification"]}))
    err = _one_line(capsys, "--format", "onnx", model, tmp_path / "m.onnx", "--exporter", "legacy")
    assert "no classifier.weight" in err and "its head would be random" in err
    assert not (tmp_path / "m.onnx").exists()
