"""Sentence vectors: the pooling modes (albertlm.pooling) by hand and through ONNX, and `albertlm embed`:
one vector per input line in input order (blank lines included), .npy / .jsonl / stdout outputs,
one-line errors, atomic outputs."""

from __future__ import annotations

import errno
import json
import random
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from albertlm import AlbertConfig, AlbertForPreTraining, AlbertModel
from albertlm.cli import main
from albertlm.heads import AlbertForSequenceClassification
from albertlm.inference.embed import EmbedSettings, load_embedder, split_lines
from albertlm.pooling import SentenceEmbedder, max_pool, mean_pool
from albertlm.tokenizer import Tokenizer, train_tokenizer

WORDS = "the cat dog sat ran on a mat far away good bad film plot very quite".split()
LINES = ["the cat sat on the mat", "", "a dog ran far away, very far away, on and on and on " * 3, "   ",
         "good film", "bad plot", "", "the"]
TINY = dict(embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=64)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, one_thread) -> Path:
    """A random tiny AlbertForPreTraining (pooler included) with a SentencePiece vocabulary trained here."""
    path = tmp_path_factory.mktemp("pretrained")
    r = random.Random(0)
    train_tokenizer([" ".join(r.choices(WORDS, k=10)) for _ in range(300)], path, vocab_size=60, log=lambda m: None)
    torch.manual_seed(0)
    AlbertForPreTraining(AlbertConfig(vocab_size=Tokenizer.load(path).vocab_size, **TINY)).save_pretrained(path)
    return path


def write_input(path: Path, lines: list[str], ending: str = "\n", final: bool = True) -> Path:
    path.write_bytes((ending.join(lines) + (ending if final else "")).encode("utf-8"))
    return path


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = main(["embed", *map(str, argv)])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def one_line_error(rc: int, err: str) -> str:
    """The error line, checked to be the only line and no traceback."""
    assert rc == 2 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("albertlm embed: error: "), err
    return lines[0]


# ---------------------------------------------------------------------------- pooling
def test_pooling_modes_are_what_they_say():
    torch.manual_seed(0)
    model = AlbertModel(AlbertConfig(vocab_size=50, **TINY)).eval()
    ids = torch.randint(5, 50, (3, 9))
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, 5:], mask[2, 2:] = 0, 0
    with torch.no_grad():
        h = model(ids, mask).last_hidden_state
        by_hand = {"cls": h[:, 0], "pooler": torch.tanh(model.pooler(h[:, 0])),
                   "mean": torch.stack([h[b, :int(mask[b].sum())].mean(0) for b in range(3)]),
                   "max": torch.stack([h[b, :int(mask[b].sum())].max(0).values for b in range(3)])}
        for mode, want in by_hand.items():
            got = SentenceEmbedder(model, mode)(ids, mask)
            assert torch.allclose(got, want, atol=1e-6), mode
            unit = SentenceEmbedder(model, mode, normalize=True)(ids, mask)
            assert torch.allclose(unit, want / want.norm(dim=-1, keepdim=True), atol=1e-6)
            alone = torch.cat([SentenceEmbedder(model, mode)(ids[b:b + 1, :int(mask[b].sum())]) for b in range(3)])
            assert torch.allclose(got, alone, atol=1e-5), mode  # padding changes nothing
    empty = torch.zeros(1, 4)  # a row of padding only: zeros, not -inf or NaN
    assert torch.equal(max_pool(torch.randn(1, 4, 3), empty), torch.zeros(1, 3))
    assert torch.equal(mean_pool(torch.randn(1, 4, 3), empty), torch.zeros(1, 3))
    with pytest.raises(ValueError, match="has none"):
        SentenceEmbedder(AlbertModel(AlbertConfig(vocab_size=50, **TINY), add_pooling_layer=False), "pooler")


@pytest.mark.parametrize("mode", ["cls", "pooler", "mean", "max"])
def test_the_embedder_traces_into_onnx(mode, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    torch.manual_seed(0)
    model = SentenceEmbedder(AlbertModel(AlbertConfig(vocab_size=50, **TINY)), mode, normalize=True).eval()
    ids, mask = torch.randint(5, 50, (2, 8)), torch.ones(2, 8, dtype=torch.long)
    mask[1, 4:] = 0
    axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}}
    with warnings.catch_warnings():  # the TorchScript exporter (deprecated): seconds, where torch.export takes longer
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (ids, mask), tmp_path / "e.onnx", dynamo=False, opset_version=18,
                          input_names=list(axes), output_names=["embedding"], dynamic_axes=axes)
    session = ort.InferenceSession(str(tmp_path / "e.onnx"), providers=["CPUExecutionProvider"])
    ids, mask = torch.randint(5, 50, (3, 11)), torch.ones(3, 11, dtype=torch.long)  # other shapes than traced
    mask[0, 3:], mask[2, 7:] = 0, 0
    got = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
    with torch.no_grad():
        assert np.abs(got - model(ids, mask).numpy()).max() < 1e-5


# ---------------------------------------------------------------------------- the command
def test_one_vector_per_line_in_input_order(model_dir, tmp_path, capsys):
    text = write_input(tmp_path / "in.txt", LINES, ending="\r\n", final=False)
    rc, out, err = run(capsys, model_dir, "--input", text, "--output", tmp_path / "v.npy", "--batch-size", 3,
                       "--no-progress")
    assert rc == 0 and out == "" and "8 vectors of 32 (mean pooling" in err, err
    vectors = np.load(tmp_path / "v.npy")
    assert vectors.shape == (len(LINES), 32) and vectors.dtype == np.float32
    embedder = load_embedder(model_dir, EmbedSettings(device="cpu"))
    alone = np.concatenate([embedder.encode([line]) for line in LINES])  # each line by itself, no batching
    assert np.abs(vectors - alone).max() < 1e-5
    assert np.array_equal(vectors[1], vectors[6])  # the blank lines: the vector of the empty text
    assert not np.allclose(vectors[0], vectors[7])
    assert split_lines(b"\xef\xbb\xbfa\n\nb", "x") == ["a", "", "b"]  # a BOM dropped, no final newline needed


def test_jsonl_and_stdout_hold_the_same_vectors(model_dir, tmp_path, capsys):
    text = write_input(tmp_path / "in.txt", LINES)
    assert run(capsys, model_dir, "--input", text, "--output", tmp_path / "v.npy", "--pooling", "max",
               "--normalize")[0] == 0
    assert run(capsys, model_dir, "--input", text, "--output", tmp_path / "v.jsonl", "--pooling", "max",
               "--normalize")[0] == 0
    lines = (tmp_path / "v.jsonl").read_text().splitlines()
    as_json = np.array([json.loads(line) for line in lines], dtype=np.float32)
    npy = np.load(tmp_path / "v.npy")
    assert len(lines) == len(LINES) and np.array_equal(as_json, npy)  # 9 digits give each float32 back exactly
    assert np.allclose(np.linalg.norm(npy, axis=1), 1.0, atol=1e-6)
    rc, out, _ = run(capsys, model_dir, "--input", text, "--pooling", "max", "--normalize")
    assert rc == 0 and out.splitlines() == lines


def test_stdin_and_a_progress_bar(model_dir, tmp_path, capsys, monkeypatch):
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("\n".join(LINES).encode())))
    rc, out, err = run(capsys, model_dir, "--input", "-", "--batch-size", 2, "--pooling", "cls")
    assert rc == 0 and len(out.splitlines()) == len(LINES)
    assert "text" in err  # tqdm's bar: 4 batches
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"one\ntwo\n")))
    rc, _, err = run(capsys, model_dir, "--input", "-", "--batch-size", 1, "--no-progress")
    assert rc == 0 and err == ""


def test_any_albert_directory_gives_the_backbone_s_vectors(model_dir, tmp_path):
    """A fine-tuned head's directory and a bare AlbertModel's embed as the pretrained one they came from."""
    pretrained = AlbertForPreTraining.from_pretrained(model_dir)
    for name, model in (("bare", pretrained.albert), ("head", AlbertForSequenceClassification(pretrained.config))):
        if name == "head":
            model.albert.load_state_dict(pretrained.albert.state_dict())
        model.save_pretrained(tmp_path / name)
        Tokenizer.load(model_dir).save(tmp_path / name)
    settings = EmbedSettings(device="cpu", pooling="pooler")
    want = load_embedder(model_dir, settings).encode(LINES)
    for name in ("bare", "head"):
        assert np.abs(load_embedder(tmp_path / name, settings).encode(LINES) - want).max() < 1e-6


def test_int8_vectors_stay_close_to_fp32(model_dir):
    fp32 = load_embedder(model_dir, EmbedSettings(device="cpu")).encode(LINES)
    with warnings.catch_warnings():  # the fbgemm backend's deprecation notice (tests/test_quantize.py checks it)
        warnings.simplefilter("ignore")
        int8 = load_embedder(model_dir, EmbedSettings(int8=True)).encode(LINES)
    cosine = (fp32 * int8).sum(1) / np.linalg.norm(fp32, axis=1) / np.linalg.norm(int8, axis=1)
    assert int8.dtype == np.float32 and cosine.min() > 0.99 and not np.array_equal(fp32, int8)


def test_errors_are_one_line(model_dir, tmp_path, capsys):
    text = write_input(tmp_path / "in.txt", LINES)
    mean_head = AlbertForSequenceClassification(AlbertConfig(vocab_size=Tokenizer.load(model_dir).vocab_size,
                                                             classifier_pooling="mean", **TINY))
    mean_head.save_pretrained(tmp_path / "mean-head")
    Tokenizer.load(model_dir).save(tmp_path / "mean-head")
    (tmp_path / "bad.txt").write_bytes(b"fine\nnot \xff utf-8\n")
    (tmp_path / "empty-dir").mkdir()
    cases = {
        "missing.txt: no such text file": [model_dir, "--input", tmp_path / "missing.txt"],
        "must end in .npy or .jsonl": [model_dir, "--input", text, "--output", tmp_path / "v.txt"],
        "not a model directory": [tmp_path / "nowhere", "--input", text],
        "no config.json": [tmp_path / "empty-dir", "--input", text],
        "would overwrite its own input": [model_dir, "--input", tmp_path / "in.jsonl", "--output",
                                          tmp_path / "in.jsonl"],
        "its directory does not exist": [model_dir, "--input", text, "--output", tmp_path / "no" / "v.npy"],
        "no pooler weights": [tmp_path / "mean-head", "--input", text, "--pooling", "pooler"],
        "beyond the model's max_position_embeddings": [model_dir, "--input", text, "--max-seq-length", 65],
        "line 2 is not UTF-8": [model_dir, "--input", tmp_path / "bad.txt"],
        "--batch-size must be at least 1": [model_dir, "--input", text, "--batch-size", 0],
    }
    (tmp_path / "in.jsonl").write_text("[1]\n")
    for expected, argv in cases.items():
        line = one_line_error(*run(capsys, *argv)[::2])
        assert expected in line, (expected, line)
    assert (tmp_path / "in.jsonl").read_text() == "[1]\n"
    with pytest.raises(SystemExit):  # argparse's own: a choice that does not exist
        main(["embed", str(model_dir), "--input", str(text), "--pooling", "weighted"])


def test_a_failed_write_leaves_the_earlier_output(model_dir, tmp_path, capsys, monkeypatch):
    import albertlm.inference.embed as embed

    text = write_input(tmp_path / "in.txt", LINES)
    out = tmp_path / "v.npy"
    out.write_bytes(b"earlier")

    def full_disk(fh, array):
        fh.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(embed.np, "save", full_disk)
    line = one_line_error(*run(capsys, model_dir, "--input", text, "--output", out)[::2])
    assert "no space left" in line and str(out) in line
    assert out.read_bytes() == b"earlier" and sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "v.npy"]
