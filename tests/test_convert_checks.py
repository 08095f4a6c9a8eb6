"""`albertlm convert`'s output directory and vocabulary checks: DST claimed, replaced only as a whole
and only when it is an earlier conversion; a vocabulary that is corrupt, foreign or ambiguous is
refused before anything is written; errors writing name the file being written."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from albertlm import convert as convert_module
from albertlm.cli import main
from albertlm.convert import convert
from albertlm.errors import AlbertlmError
from albertlm.rundir import RunLock

FIXTURES = Path(__file__).parent / "fixtures" / "tf"


@pytest.fixture(scope="module")
def hg(tmp_path_factory) -> Path:
    """Google's fixture as a Hugging Face directory (spiece.model)."""
    out = tmp_path_factory.mktemp("hg") / "hg"
    convert(FIXTURES / "google", out)
    return out


def _error(capsys, *argv) -> str:
    assert main(["convert", *map(str, argv)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def _snapshot(d: Path) -> dict[str, bytes]:
    """The files of a directory (the marker and lock aside: they carry times and pids)."""
    return {p.name: p.read_bytes() for p in d.iterdir() if p.is_file() and not p.name.startswith(".albertlm")}


def _no_temporaries(parent: Path) -> bool:
    return not [p for p in parent.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp")]


# ---------------------------------------------------------------------------- DST: claimed, whole, ours only
def test_force_with_a_directory_at_one_of_its_names_changes_nothing(tmp_path, capsys):
    """CD10: a directory named config.json in an earlier conversion: refused before any work."""
    groups = tmp_path / "groups"
    shutil.copytree(FIXTURES / "groups", groups)
    shutil.copyfile(FIXTURES / "google" / "spiece.model", groups / "spiece.model")
    out = tmp_path / "out"
    convert(groups, out)
    (out / "config.json").unlink()
    (out / "config.json").mkdir()
    before = _snapshot(out)
    err = _error(capsys, FIXTURES / "google", out, "--force")
    assert f"{out / 'config.json'}: a directory where convert writes a file" in err
    assert _snapshot(out) == before and (out / "config.json").is_dir()
    assert _no_temporaries(tmp_path)


def test_force_replaces_an_earlier_conversion_as_a_whole(tmp_path, capsys):
    out = tmp_path / "out"
    convert(FIXTURES / "google", out, to="tf")
    assert main(["convert", str(FIXTURES / "google"), str(out)]) == 2  # not without --force
    assert "holds an earlier conversion" in capsys.readouterr().err and "model.ckpt.index" in os.listdir(out)
    assert main(["convert", str(FIXTURES / "google"), str(out), "--force"]) == 0
    fresh = tmp_path / "fresh"
    convert(FIXTURES / "google", fresh)
    assert _snapshot(out) == _snapshot(fresh)  # the TF files are gone: no mix of two conversions
    assert _no_temporaries(tmp_path)


def test_force_refuses_a_directory_holding_someone_elses_files(tmp_path, capsys):
    out = tmp_path / "out"
    convert(FIXTURES / "google", out)
    (out / "notes.txt").write_text("mine")
    before = _snapshot(out)
    err = _error(capsys, FIXTURES / "google", out, "--force")
    assert "did not write (notes.txt)" in err and "nothing was changed" in err
    assert _snapshot(out) == before
    # a directory convert never wrote (no marker), even with only model files in it, is not replaced
    mine = tmp_path / "mine"
    mine.mkdir()
    shutil.copyfile(out / "config.json", mine / "config.json")
    assert "holds files albertlm did not write (config.json)" in _error(capsys, FIXTURES / "google", mine, "--force")


def test_the_lock_is_held_until_the_new_directory_is_in_place(tmp_path, monkeypatch):
    out = tmp_path / "out"
    convert(FIXTURES / "google", out)
    real = convert_module.replace_directory
    seen = []

    def swap(new, dst):
        for d in (dst, new):  # the earlier conversion and the new one: both locked
            with pytest.raises(AlbertlmError, match="in use"):
                RunLock(d).__enter__()
        real(new, dst)
        with pytest.raises(AlbertlmError, match="in use"):
            RunLock(dst).__enter__()
        seen.append(dst)

    monkeypatch.setattr(convert_module, "replace_directory", swap)
    convert(FIXTURES / "google", out, force=True)
    assert seen
    with RunLock(out):  # released at the end
        pass


def test_the_converted_directory_gets_the_umasks_mode_or_keeps_its_own(tmp_path):
    """The directory is built in a temporary (mkdtemp makes it 0700): put in place, it must have the
    mode mkdir gives under the umask, so another user can read the model, or an existing DST's own."""
    old = os.umask(0o022)
    try:
        convert(FIXTURES / "google", tmp_path / "new")
        assert (tmp_path / "new").stat().st_mode & 0o7777 == 0o755
        (tmp_path / "mine").mkdir()
        os.chmod(tmp_path / "mine", 0o750)  # a user's empty directory keeps the mode they gave it
        convert(FIXTURES / "google", tmp_path / "mine")
        assert (tmp_path / "mine").stat().st_mode & 0o7777 == 0o750
        convert(FIXTURES / "google", tmp_path / "mine", to="tf", force=True)
        assert (tmp_path / "mine").stat().st_mode & 0o7777 == 0o750
    finally:
        os.umask(old)


def test_a_new_or_empty_destination_is_filled_in_place(tmp_path, monkeypatch):
    """A mount point (a container's volume) cannot be renamed (EBUSY) and its parent may be another
    file system or not writable: a DST holding no earlier conversion is built inside itself and
    filled in place, the user's directory kept (the same inode, its own mode)."""
    def busy(new, dst):
        raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(dst))

    monkeypatch.setattr(convert_module, "replace_directory", busy)
    real_mkdtemp = tempfile.mkdtemp

    def parent_read_only(*args, dir=None, **kwargs):
        if Path(dir) == tmp_path:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(Path(dir) / ".x.tmp"))
        return real_mkdtemp(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkdtemp", parent_read_only)
    mine = tmp_path / "volume"
    mine.mkdir()
    inode = mine.stat().st_ino
    summary = convert(FIXTURES / "google", mine, to="tf")
    assert mine.stat().st_ino == inode and sorted(_snapshot(mine)) == summary.files
    assert "albert_config.json" in summary.files and _no_temporaries(mine) and _no_temporaries(tmp_path)
    # a killed run's staging directory inside DST is its own: removed by the next run, not refused
    with convert_module.OutputDir(tmp_path / "new", "convert", convert_module.CONVERT_FILES).claim():
        (tmp_path / "new" / ".albertlm-convert.abc.tmp").mkdir()  # killed while it built the conversion
    assert convert(FIXTURES / "google", tmp_path / "new").files
    assert not [p for p in (tmp_path / "new").iterdir() if p.name.startswith(".albertlm-convert.")]
    # --force over an earlier conversion in a mount point is refused before any work, saying why
    monkeypatch.setattr(os.path, "ismount", lambda path: Path(path) == mine)
    with pytest.raises(AlbertlmError, match="a mount point holding an earlier conversion"):
        convert(FIXTURES / "google", mine, force=True)


def test_a_busy_destination_is_refused(tmp_path):
    out = tmp_path / "out"
    convert(FIXTURES / "google", out)
    before = _snapshot(out)
    with RunLock(out):
        with pytest.raises(AlbertlmError, match="in use"):
            convert(FIXTURES / "google", out, force=True)
    assert _snapshot(out) == before


def test_a_failed_write_leaves_the_earlier_conversion_and_no_new_directory(tmp_path, monkeypatch):
    out = tmp_path / "out"
    convert(FIXTURES / "google", out, to="tf")
    before = _snapshot(out)

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(convert_module, "atomic_write_text", full)  # albert_config.json, after the checkpoint
    with pytest.raises(OSError) as failed:
        convert(FIXTURES / "google", out, to="tf", force=True)
    assert failed.value.filename == str(out)  # named by DST, not by the temporary it was built in
    assert _snapshot(out) == before
    with pytest.raises(OSError):
        convert(FIXTURES / "google", tmp_path / "new", to="tf")
    assert not (tmp_path / "new").exists() and _no_temporaries(tmp_path)


def test_a_failed_conversion_removes_the_directory_it_created_before_unlocking_it(tmp_path, monkeypatch):
    """Removed after the lock's release, the new DST could meanwhile be claimed by a second convert,
    whose directory (marker and lock) would then be deleted under it."""
    out = tmp_path / "new"
    real_exit, seen = RunLock.__exit__, []

    def release(self, *exc):
        if self.run_dir == out:
            seen.append(os.path.lexists(out))
        real_exit(self, *exc)

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(RunLock, "__exit__", release)
    monkeypatch.setattr(convert_module, "atomic_write_text", full)
    with pytest.raises(OSError):
        convert(FIXTURES / "google", out, to="tf")
    assert seen == [False] and not out.exists()


def test_a_link_to_nothing_is_one_line(tmp_path, capsys):
    """CD08."""
    (tmp_path / "out").symlink_to(tmp_path / "nowhere")
    err = _error(capsys, FIXTURES / "google", tmp_path / "out")
    assert "a link to nothing" in err and not (tmp_path / "nowhere").exists()


def _read_only(monkeypatch, root: Path) -> None:
    """Make `root` behave as a read-only file system for mkdir (tests run as root, where chmod
    does not stop writes): existing names give EEXIST, missing parents ENOENT, the rest EROFS."""
    real = os.mkdir

    def mkdir(path, mode=0o777, *args, **kwargs):
        p = Path(os.fsdecode(path))
        if p == root or root in p.parents:
            if os.path.lexists(p):
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path))
            if not p.parent.exists():
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)


@pytest.mark.parametrize("where", ["out", "a/b/out"])
def test_a_read_only_destination_is_one_line(where, tmp_path, monkeypatch, capsys):
    """RO1 / RO2."""
    ro = tmp_path / "ro"
    ro.mkdir()
    _read_only(monkeypatch, ro)
    err = _error(capsys, FIXTURES / "google", ro / where)
    assert "Read-only file system: choose an output on a writable file system" in err
    assert str(ro / where.split("/")[0]) in err and not os.listdir(ro)


def test_a_write_that_fails_names_the_file_being_written(hg, tmp_path, capsys):
    """DF2: a write failing in the middle (here: a file-size limit, EFBIG, as a full disk gives
    ENOSPC) names the file in DST, not the vocabulary being read."""
    resource = pytest.importorskip("resource")
    import signal

    out = tmp_path / "tf"
    limit = (hg / "spiece.model").stat().st_size // 2  # above the checkpoint's files, below the vocabulary
    old_limit, old_handler = resource.getrlimit(resource.RLIMIT_FSIZE), signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old_limit[1]))
        code = main(["convert", str(hg), str(out), "--to", "tf"])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"{out / 'spiece.model'}: File too large" in err and str(hg) not in err
    assert not out.exists() and _no_temporaries(tmp_path)


# ---------------------------------------------------------------------------- the vocabulary
def test_a_corrupt_vocabulary_is_refused_before_writing(hg, tmp_path, capsys):
    """HF18 / HF19: --to tf copies the vocabulary; it is loaded first."""
    bad = tmp_path / "bad"
    shutil.copytree(hg, bad)
    (bad / "spiece.model").write_bytes(os.urandom(1000))
    assert f"{bad / 'spiece.model'}: not a SentencePiece model" in _error(capsys, bad, tmp_path / "o1", "--to", "tf")
    shutil.copyfile(hg / "spiece.model", bad / "spiece.model")
    (bad / "tokenizer_config.json").write_bytes(b'{"x": "\xff"}')
    assert f"{bad / 'tokenizer_config.json'}: not UTF-8 text" in _error(capsys, bad, tmp_path / "o2", "--to", "tf")
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()


def test_two_kinds_of_vocabulary_beside_a_checkpoint_are_refused(tmp_path, capsys):
    """CZ04: albert_zh's WordPiece source with a stray spiece.model."""
    src = tmp_path / "zh"
    shutil.copytree(FIXTURES / "albert_zh", src)
    shutil.copyfile(FIXTURES / "google" / "spiece.model", src / "spiece.model")
    err = _error(capsys, src, tmp_path / "out")
    assert f"{src / 'spiece.model'} and {src / 'vocab.txt'}: two different vocabularies" in err
    assert not (tmp_path / "out").exists()
    # the same file under Google's release name as well is one vocabulary
    google = tmp_path / "google"
    shutil.copytree(FIXTURES / "google", google)
    shutil.copyfile(google / "spiece.model", google / "30k-clean.model")
    assert convert(google, tmp_path / "g").files == ["config.json", "model.safetensors", "spiece.model",
                                                     "tokenizer_config.json"]


def test_a_vocabulary_of_another_size_is_refused_in_both_directions(tmp_path, capsys):
    src = tmp_path / "zh"
    shutil.copytree(FIXTURES / "albert_zh", src)
    lines = (src / "vocab.txt").read_text().splitlines()
    (src / "vocab.txt").write_text("\n".join(lines[:60]) + "\n")
    err = _error(capsys, src, tmp_path / "tf", "--to", "tf")
    assert f"{src / 'vocab.txt'}: 60 lines, but {src / 'albert_config_tiny.json'} has vocab_size 99" in err
    assert not (tmp_path / "tf").exists()
