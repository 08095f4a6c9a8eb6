"""ONNX export: each shared tensor stored once, onnxruntime outputs equal ours on dynamic shapes,
one-line refusals, and onnxruntime int8 that keeps a trained model's predictions."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")
import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402

from albertlm.cli import main  # noqa: E402
from albertlm.config import get_preset  # noqa: E402
from albertlm.errors import AlbertlmError  # noqa: E402
from albertlm.heads import HEADS, AlbertForSequenceClassification  # noqa: E402
from albertlm.inference.onnx_backend import OnnxModel  # noqa: E402
from albertlm.interop.onnx import ONNX_OUTPUTS, export_onnx, quantize_onnx_int8  # noqa: E402
from albertlm.model import AlbertForPreTraining, AlbertModel  # noqa: E402

CLASSES = {"AlbertForPreTraining": AlbertForPreTraining, **HEADS}


def random_model(name: str, layers: int = 6) -> torch.nn.Module:
    """Every parameter drawn at random: the init's equal tensors (zero biases, unit LayerNorms)
    would otherwise let an exporter merge them and hide a duplicated one in the byte count."""
    torch.manual_seed(0)
    model = CLASSES[name](get_preset("test", num_hidden_layers=layers)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    return model


def stored_bytes(path) -> int:
    return sum(numpy_helper.to_array(t).nbytes for t in onnx.load(path).graph.initializer)


def distinct_parameter_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())  # parameters() yields a shared one once


def inputs(name: str, B: int, S: int, pad: int) -> dict[str, torch.Tensor]:
    shape = (B, 3, S) if name == "AlbertForMultipleChoice" else (B, S)
    gen = torch.Generator().manual_seed(B * 100 + S)
    mask = torch.ones(shape, dtype=torch.long)
    if pad:
        mask[-1, ..., -pad:] = 0  # the last row padded
    types = torch.zeros(shape, dtype=torch.long)
    types[..., S // 2:] = 1
    return {"input_ids": torch.randint(0, 128, shape, generator=gen), "attention_mask": mask, "token_type_ids": types}


def assert_same_outputs(model, path, name: str) -> None:
    runner = OnnxModel(path)
    for B, S, pad in ((3, 7, 3), (1, 20, 0)):  # other batch and sequence sizes than the export's 2 x 8
        batch = inputs(name, B, S, pad)
        with torch.no_grad():
            ours, theirs = model(**batch), runner(**batch)
        for output in ONNX_OUTPUTS[name]:
            expected = getattr(ours, output)
            got = getattr(theirs, output)
            assert got.shape == expected.shape
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-4)


def test_fine_tuned_classifier_through_the_cli(tmp_path, capsys):
    """The current exporter via `albertlm export`: sizes, dynamic axes, parity."""
    model = random_model("AlbertForSequenceClassification")
    model.save_pretrained(tmp_path / "model")
    out = tmp_path / "model.onnx"
    assert main(["export", "--format", "onnx", str(tmp_path / "model"), str(out)]) == 0
    assert "1.000x the distinct parameter bytes" in capsys.readouterr().out
    assert stored_bytes(out) <= 1.05 * distinct_parameter_bytes(model)
    assert_same_outputs(model, out, "AlbertForSequenceClassification")
    graph = onnx.load(out).graph
    shared = [t.name for t in graph.initializer if "encoder.attention.0.qkv.weight" in t.name]
    assert len(shared) == 1  # one copy, read by all six layer applications
    dims = [d.dim_param for d in graph.input[0].type.tensor_type.shape.dim]
    assert all(dims) and len(dims) == 2  # both axes symbolic


@pytest.mark.parametrize("name", list(CLASSES))
def test_every_class_is_stored_once_and_matches(name, tmp_path):
    """Every class with the TorchScript exporter (fast; the current one is in the slow test below)."""
    model = random_model(name)
    report = export_onnx(model, tmp_path / "m.onnx", dynamo=False)
    assert report["ratio"] <= 1.05
    assert report["ratio"] == pytest.approx(1.0, abs=1e-3)  # export refuses above 1.05; each tensor once is 1.0
    assert stored_bytes(tmp_path / "m.onnx") <= 1.05 * distinct_parameter_bytes(model)
    assert_same_outputs(model, tmp_path / "m.onnx", name)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CLASSES))
def test_every_class_with_the_current_exporter(name, tmp_path):
    model = random_model(name)
    export_onnx(model, tmp_path / "m.onnx", dynamo=True)
    assert stored_bytes(tmp_path / "m.onnx") <= 1.05 * distinct_parameter_bytes(model)
    assert_same_outputs(model, tmp_path / "m.onnx", name)


def test_the_tied_decoder_is_the_word_table(tmp_path):
    model = random_model("AlbertForPreTraining")
    export_onnx(model, tmp_path / "m.onnx", dynamo=False)
    V, E = model.albert.embeddings.word.weight.shape
    tables = [t for t in onnx.load(tmp_path / "m.onnx").graph.initializer if sorted(t.dims) == sorted([V, E])]
    assert len(tables) == 1  # the decoder reads the word table; no transposed copy


def test_onnxruntime_int8_keeps_a_trained_models_predictions(trained_classifier, tmp_path):
    model, ids, labels = trained_classifier
    export_onnx(model, tmp_path / "fp32.onnx", dynamo=False)
    report = quantize_onnx_int8(tmp_path / "fp32.onnx", tmp_path / "int8.onnx")
    with torch.no_grad():
        fp32 = model(ids).logits
    int8 = OnnxModel(tmp_path / "int8.onnx")(ids).logits
    assert (fp32.argmax(-1) == labels).float().mean() > 0.9
    assert (int8.argmax(-1) == fp32.argmax(-1)).float().mean() >= 0.97
    assert not torch.allclose(int8, fp32, atol=1e-5)  # it really ran in int8
    # The shared block's four matrices are quantized once: every layer application reads them.
    graph = onnx.load(tmp_path / "int8.onnx").graph
    matmuls = [n for n in graph.node if n.op_type == "MatMulInteger"]
    assert report["quantized_matmuls"] == len(matmuls)
    encoder = {n.input[1] for n in matmuls if "encoder" in n.input[1]}  # the int8 weights
    assert len(encoder) == 4  # qkv, out, up, down: one int8 copy each
    assert sum(n.input[1] in encoder for n in matmuls) == 4 * model.config.num_hidden_layers
    assert report["initializer_bytes"] < stored_bytes(tmp_path / "fp32.onnx") / 2


def test_cli_int8_export(trained_classifier, tmp_path, capsys):
    model, ids, _ = trained_classifier
    model.save_pretrained(tmp_path / "model")
    out = tmp_path / "int8.onnx"
    assert main(["export", str(tmp_path / "model"), str(out), "--int8", "--exporter", "legacy"]) == 0
    assert "int8 MatMuls" in capsys.readouterr().out
    with torch.no_grad():
        expected = model(ids).logits.argmax(-1)
    assert (OnnxModel(out)(ids).logits.argmax(-1) == expected).float().mean() >= 0.97
    assert sorted(p.name for p in tmp_path.iterdir()) == ["int8.onnx", "model"]  # no temporary left behind


def test_refusals_are_one_line(tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("not a model")
    assert main(["export", "--format", "onnx", str(tmp_path / "notes"), str(tmp_path / "m.onnx")]) == 2
    err = capsys.readouterr().err
    assert "config.json" in err and len(err.strip().splitlines()) == 1
    assert main(["export", str(tmp_path / "missing"), str(tmp_path / "m.onnx")]) == 2
    assert "not a model directory" in capsys.readouterr().err
    AlbertModel(get_preset("test")).save_pretrained(tmp_path / "backbone")
    assert main(["export", str(tmp_path / "backbone"), str(tmp_path / "m.onnx")]) == 2
    assert "holds an AlbertModel" in capsys.readouterr().err
    assert not (tmp_path / "m.onnx").exists()
    with pytest.raises(AlbertlmError, match="fp32 model on the CPU"):
        export_onnx(AlbertForSequenceClassification(get_preset("test")).to(torch.bfloat16), tmp_path / "m.onnx")


def test_the_core_imports_without_onnx_and_says_how_to_install_it():
    code = ("import sys\n"
            "for name in ('onnx', 'onnxruntime', 'onnxscript'): sys.modules[name] = None\n"
            "import albertlm, albertlm.cli, albertlm.inference.onnx_backend, albertlm.interop.onnx as o\n"
            "from albertlm.errors import AlbertlmError\n"
            "try:\n    o.require('onnx')\nexcept AlbertlmError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "pip install 'albertlm[onnx]'" in done.stdout


def test_outputs_are_numpy_compatible(tmp_path):
    """OnnxModel takes the torch model's defaults: no mask means no padding, no types means segment A."""
    model = random_model("AlbertForSequenceClassification", layers=2)
    export_onnx(model, tmp_path / "m.onnx", dynamo=False)
    ids = torch.randint(0, 128, (2, 5))
    with torch.no_grad():
        expected = model(ids).logits.numpy()
    np.testing.assert_allclose(OnnxModel(tmp_path / "m.onnx")(ids).logits.numpy(), expected, atol=1e-4)


def test_a_refused_export_leaves_an_existing_file_alone(tmp_path, monkeypatch):
    from albertlm.interop import onnx as onnx_module

    path = tmp_path / "model.onnx"
    path.write_bytes(b"an older export")
    monkeypatch.setattr(onnx_module, "SIZE_TOLERANCE", 0.5)  # every file now counts as duplicated
    with pytest.raises(AlbertlmError, match="nothing written"):
        export_onnx(random_model("AlbertForSequenceClassification", layers=2), path)
    assert path.read_bytes() == b"an older export"
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"]  # no temporary left behind
