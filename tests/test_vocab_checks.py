"""A WordPiece vocab.txt read with care (a byte-order mark, a repeated special token), and a model
directory's vocabulary held to its config.json's vocab_size wherever the two are loaded together."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from albertlm.cli import main
from albertlm.config import get_preset
from albertlm.errors import AlbertlmError
from albertlm.heads import AlbertForSequenceClassification
from albertlm.convert import convert
from albertlm.tokenizer import load_vocabulary
from albertlm.tokenizer.wordpiece import WordPieceTokenizer

FIXTURES = Path(__file__).parent / "fixtures" / "tf"


@pytest.fixture(scope="module")
def hz(tmp_path_factory) -> Path:
    """albert_zh's fixture as a model directory with a WordPiece vocab.txt (99 lines, vocab_size 99)."""
    out = tmp_path_factory.mktemp("hz") / "hz"
    convert(FIXTURES / "albert_zh", out)
    return out


def _copy(hz: Path, tmp_path: Path) -> Path:
    d = tmp_path / "model"
    shutil.copytree(hz, d)
    return d


def _one_line(capsys, *argv) -> str:
    assert main(list(map(str, argv))) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_a_byte_order_mark_is_refused_naming_the_file(hz, tmp_path, capsys):
    """CZ03 / VW05: transformers' BertTokenizer would read "\\ufeff[PAD]" as the first entry."""
    d = _copy(hz, tmp_path)
    (d / "vocab.txt").write_bytes(b"\xef\xbb\xbf" + (hz / "vocab.txt").read_bytes())
    with pytest.raises(AlbertlmError, match="vocab.txt: starts with a UTF-8 byte-order mark"):
        load_vocabulary(d)
    assert "byte-order mark" in _one_line(capsys, "fill-mask", "--model", d, "中[MASK]国")
    src = tmp_path / "zh"  # and in a TF source, before anything is written
    shutil.copytree(FIXTURES / "albert_zh", src)
    (src / "vocab.txt").write_bytes(b"\xef\xbb\xbf" + (FIXTURES / "albert_zh" / "vocab.txt").read_bytes())
    assert f"{src / 'vocab.txt'}: starts with a UTF-8 byte-order mark" in _one_line(
        capsys, "convert", src, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_repeated_special_token_is_refused_naming_both_lines(hz, tmp_path, capsys):
    """VW01: [CLS] on line 20 as well would move special_ids.cls to 19."""
    d = _copy(hz, tmp_path)
    lines = (d / "vocab.txt").read_text(encoding="utf-8").split("\n")
    cls_line = lines.index("[CLS]") + 1
    lines[19] = "[CLS]"
    (d / "vocab.txt").write_text("\n".join(lines), encoding="utf-8")
    err = _one_line(capsys, "fill-mask", "--model", d, "中[MASK]国")
    assert f"vocab.txt: lines {cls_line} and 20 both hold '[CLS]'" in err
    # a repeated ordinary piece maps to its last line, as in BERT and transformers: ids unchanged
    tok = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "a"])
    assert tok.convert_tokens_to_ids(["a", "b"]) == [7, 6] and tok.vocab_size == 8


@pytest.mark.parametrize("change, lines", [("shorter", 60), ("longer", 159)])
def test_a_vocabulary_of_another_size_than_the_model_is_refused(change, lines, hz, tmp_path, capsys):
    """VW20 (60 lines for vocab_size 99: characters become [UNK]) / VW19 (60 extra lines: ids the
    model has no row for)."""
    from albertlm.tokenizer import load_model_vocabulary

    d = _copy(hz, tmp_path)
    entries = (hz / "vocab.txt").read_text(encoding="utf-8").splitlines()
    entries = entries[:60] if change == "shorter" else entries + [f"extra{i}" for i in range(1, 61)]
    (d / "vocab.txt").write_text("".join(e + "\n" for e in entries), encoding="utf-8")
    want = f"{d / 'vocab.txt'}: {lines} lines, but {d / 'config.json'} has vocab_size 99"
    with pytest.raises(AlbertlmError, match="vocab_size 99"):
        load_model_vocabulary(d)
    assert load_vocabulary(d).vocab_size == lines  # the tokenizer alone is fine: it is the pair that is wrong
    assert want in _one_line(capsys, "fill-mask", "--model", d, "extra55 [MASK] extra60")


def test_a_fine_tuned_directory_checks_its_vocabulary_too(hz, tmp_path, capsys):
    """predict and evaluate load the tokenizer through the same function."""
    d = tmp_path / "ft"
    AlbertForSequenceClassification(get_preset("test", vocab_size=99)).save_pretrained(d)
    entries = (hz / "vocab.txt").read_text(encoding="utf-8").splitlines()[:60]
    (d / "vocab.txt").write_text("".join(e + "\n" for e in entries), encoding="utf-8")
    (tmp_path / "in.txt").write_text("中国\n", encoding="utf-8")
    assert "60 lines, but" in _one_line(capsys, "predict", "--model", d, tmp_path / "in.txt", "--device", "cpu")
    shutil.copyfile(hz / "vocab.txt", d / "vocab.txt")
    assert main(["predict", "--model", str(d), str(tmp_path / "in.txt"), "--device", "cpu"]) == 0
