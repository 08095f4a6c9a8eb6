"""TF1 checkpoint (tensor bundle) reading and writing, against fixtures written by real TensorFlow
(tests/fixtures/tf, made by make_tf_fixtures.py). No TensorFlow is needed to run these tests."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest

from albertlm.errors import AlbertlmError
from albertlm.interop.tf_bundle import (BundleReader, TFCheckpointError, UnsupportedCheckpointError,
                                        read_checkpoint, resolve_checkpoint)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "tf"
READABLE = ["dtypes", "google", "tfhub", "training", "groups", "albert_zh"]


def expected_values(name: str) -> dict[str, np.ndarray]:
    with np.load(FIXTURES / name / "values.npz", allow_pickle=False) as npz:
        return {key: npz[key] for key in npz.files}


def copy_fixture(name: str, tmp_path: Path) -> Path:
    """A writable copy of one fixture folder (tests that damage files work on copies)."""
    return Path(shutil.copytree(FIXTURES / name, tmp_path / name))


@pytest.mark.parametrize("name", READABLE)
def test_every_tensor_equals_what_tensorflow_wrote(name):
    reader = BundleReader(FIXTURES / name)
    values = expected_values(name)
    assert reader.names() == sorted(values)
    assert len(reader) == len(values)
    for key, want in values.items():
        got = reader.read(key)
        assert key in reader
        assert got.dtype == want.dtype and got.shape == want.shape, key
        assert got.tobytes() == want.tobytes(), key  # bit-exact, NaN-safe
        assert reader.shape(key) == want.shape


def test_dtypes_fixture_reports_stored_dtypes():
    reader = BundleReader(FIXTURES / "dtypes")
    assert {n: reader.dtype(n) for n in reader.names()} == {
        "bfloat16/matrix": "bfloat16", "float16/matrix": "float16", "float32/cube": "float32",
        "float32/empty": "float32", "float32/scalar": "float32", "float64/vector": "float64",
        "int32/vector": "int32", "int64/scalar": "int64", "int64/vector": "int64"}
    assert reader.shape("float32/empty") == (0, 3)
    assert reader.shape("int64/scalar") == ()
    assert reader.read("int64/scalar").item() == 123456789012
    bf16 = reader.read("bfloat16/matrix")
    assert bf16.dtype == np.float32
    assert not np.any(bf16.view(np.uint32) & 0xFFFF)  # widened bfloat16: low half always zero
    assert "missing" not in reader
    with pytest.raises(TFCheckpointError, match="no tensor 'missing'"):
        reader.read("missing")


def _load_generator():
    """The fixture generator's variable tables (it imports TensorFlow only when writing)."""
    spec = importlib.util.spec_from_file_location("make_tf_fixtures", FIXTURES / "make_tf_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["google", "tfhub", "training", "groups", "albert_zh"])
def test_albert_layouts_names_and_shapes(name):
    gen = _load_generator()
    table = {"google": gen.google_variables(), "groups": gen.google_variables(groups=2, inner=2),
             "albert_zh": gen.albert_zh_variables()}.get(name, gen.google_variables())
    want = {n: shape for n, (shape, _) in table.items()}
    if name == "tfhub":
        want = {f"module/{n}": shape for n, shape in want.items()}
    if name == "training":
        want |= {f"{n}/adam_{m}": shape for n, shape in want.items() for m in "mv"}
        want["global_step"] = ()
    reader = BundleReader(FIXTURES / name)
    assert {n: reader.shape(n) for n in reader.names()} == want
    for n in reader.names():
        assert reader.dtype(n) == ("int64" if n == "global_step" else "float32")
    if name == "training":
        assert reader.read("global_step").item() == 3
    if name == "google":
        assert reader.shape("bert/encoder/transformer/group_0/inner_group_0/ffn_1/intermediate/dense/kernel") == (32, 37)
        assert (FIXTURES / name / "spiece.model").is_file()


def test_read_checkpoint_reads_all():
    values = read_checkpoint(FIXTURES / "dtypes")
    assert values.keys() == expected_values("dtypes").keys()


def test_string_tensor_refused_rest_readable():
    reader = BundleReader(FIXTURES / "string")
    assert reader.names() == ["plain", "words"]
    np.testing.assert_array_equal(reader.read("plain"), np.arange(6, dtype=np.float32).reshape(2, 3))
    with pytest.raises(UnsupportedCheckpointError, match=r"model\.ckpt\.index: tensor words has dtype DT_STRING"):
        reader.read("words")
    with pytest.raises(UnsupportedCheckpointError, match="DT_STRING"):
        reader.dtype("words")
    with pytest.raises(UnsupportedCheckpointError, match="DT_STRING"):
        read_checkpoint(FIXTURES / "string")


def test_partitioned_variable_refused():
    reader = BundleReader(FIXTURES / "partitioned")
    assert reader.names() == ["plain", "sharded"]  # the slices' own entries stay hidden
    assert reader.shape("sharded") == (6, 4)
    np.testing.assert_array_equal(reader.read("plain"), np.arange(3, dtype=np.float32))
    with pytest.raises(UnsupportedCheckpointError, match="tensor sharded is partitioned into 3 slices"):
        reader.read("sharded")


def test_errors_are_albertlm_errors():
    assert issubclass(TFCheckpointError, AlbertlmError)
    assert issubclass(UnsupportedCheckpointError, TFCheckpointError)


def test_resolve_checkpoint_spellings(tmp_path):
    prefix = FIXTURES / "dtypes" / "model.ckpt-7"
    assert resolve_checkpoint(prefix) == prefix
    assert resolve_checkpoint(f"{prefix}.index") == prefix
    assert resolve_checkpoint(f"{prefix}.data-00000-of-00001") == prefix
    assert resolve_checkpoint(FIXTURES / "dtypes") == prefix  # via the `checkpoint` state file
    assert resolve_checkpoint(FIXTURES / "dtypes" / "checkpoint") == prefix
    folder = copy_fixture("dtypes", tmp_path)
    (folder / "checkpoint").unlink()
    assert resolve_checkpoint(folder) == folder / "model.ckpt-7"  # the single *.index


def test_resolve_checkpoint_errors(tmp_path):
    with pytest.raises(TFCheckpointError, match="no TF checkpoint here"):
        resolve_checkpoint(tmp_path)
    with pytest.raises(TFCheckpointError, match=r"nothing\.index does not exist"):
        resolve_checkpoint(tmp_path / "nothing")
    folder = copy_fixture("dtypes", tmp_path)
    (folder / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-9"\n')
    with pytest.raises(TFCheckpointError, match="names checkpoint 'model.ckpt-9'"):
        resolve_checkpoint(folder)
    (folder / "checkpoint").write_text("garbage\n")
    with pytest.raises(TFCheckpointError, match="no model_checkpoint_path"):
        resolve_checkpoint(folder)
    (folder / "checkpoint").unlink()
    shutil.copy(folder / "model.ckpt-7.index", folder / "other.index")
    with pytest.raises(TFCheckpointError, match="2 checkpoints"):
        resolve_checkpoint(folder)


def test_state_file_with_absolute_path_from_another_machine(tmp_path):
    folder = copy_fixture("dtypes", tmp_path)
    (folder / "checkpoint").write_text('model_checkpoint_path: "/gcs/run7/model.ckpt-7"\n'
                                       'all_model_checkpoint_paths: "/gcs/run7/model.ckpt-7"\n')
    assert resolve_checkpoint(folder) == folder / "model.ckpt-7"
