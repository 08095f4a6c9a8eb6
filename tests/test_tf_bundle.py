"""TF1 checkpoint (tensor bundle) reading and writing, against fixtures written by real TensorFlow
(tests/fixtures/tf, made by make_tf_fixtures.py). No TensorFlow is needed to run these tests."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest

from albertlm.errors import AlbertlmError
from albertlm.interop.sstable import (read_block_handle, build_table, field_bytes, field_fixed32, field_varint,
                                      masked_crc32c, parse_message, read_table)
from albertlm.interop.tf_bundle import (BundleReader, TFCheckpointError, UnsupportedCheckpointError,
                                        data_filename, index_filename, read_checkpoint,
                                        resolve_checkpoint, write_checkpoint)
from scripts import load_script

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
    return load_script(FIXTURES / "make_tf_fixtures.py")


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
    (folder / "checkpoint").write_text('model_checkpoint_path: "bad\\xff"\n')
    with pytest.raises(TFCheckpointError, match="not a valid string"):
        resolve_checkpoint(folder)
    (folder / "checkpoint").write_text('model_checkpoint_path: "model\\056ckpt-7"\n')  # octal escape
    assert resolve_checkpoint(folder) == folder / "model.ckpt-7"
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


def test_state_file_naming_a_checkpoint_in_another_directory_is_refused(tmp_path):
    # It once converted the other directory's 4-layer model instead of the 1-layer one beside the file.
    other, folder = copy_fixture("groups", tmp_path), copy_fixture("google", tmp_path)
    for name in (f"{other / 'model.ckpt-best'}", "../groups/model.ckpt-best"):
        (folder / "checkpoint").write_text(f'model_checkpoint_path: "{name}"\n')
        with pytest.raises(TFCheckpointError) as exc:
            resolve_checkpoint(folder)
        assert one_line_error(exc) == (f"{folder / 'checkpoint'}: names checkpoint {name!r}, outside {folder}; "
                                       "a state file may only name checkpoints in its own directory")
    (folder / "checkpoint").write_text(f'model_checkpoint_path: "{folder / "model.ckpt-best"}"\n')
    assert resolve_checkpoint(folder) == folder / "model.ckpt-best"  # absolute, but in its own directory
    (folder / "sub").mkdir()
    for f in folder.glob("model.ckpt-best.*"):
        shutil.copy(f, folder / "sub" / f.name)
    (folder / "checkpoint").write_text('model_checkpoint_path: "sub/../sub/model.ckpt-best"\n')
    assert resolve_checkpoint(folder).resolve() == (folder / "sub" / "model.ckpt-best").resolve()


# ---------------------------------------------------------------------------------------------
# Writing.

def _stored_dtypes(reader: BundleReader) -> dict[str, str]:
    return {n: "bfloat16" for n in reader.names() if reader.dtype(n) == "bfloat16"}


@pytest.mark.parametrize("name", READABLE)
def test_round_trip_matches_tensorflow_bytes(name, tmp_path):
    reader = BundleReader(FIXTURES / name)
    values = read_checkpoint(FIXTURES / name)
    prefix = tmp_path / "out" / reader.prefix.name
    write_checkpoint(prefix, values, dtypes=_stored_dtypes(reader))
    # Our files are TensorFlow's, byte for byte: same table layout, same protobuf encoding.
    assert index_filename(prefix).read_bytes() == index_filename(reader.prefix).read_bytes()
    assert (data_filename(prefix, 0, 1).read_bytes()
            == data_filename(reader.prefix, 0, 1).read_bytes())
    again = read_checkpoint(prefix.parent)
    assert again.keys() == values.keys()
    for key, value in values.items():
        assert again[key].dtype == value.dtype and again[key].tobytes() == value.tobytes()
    state = (prefix.parent / "checkpoint").read_text()
    assert state == (f'model_checkpoint_path: "{prefix.name}"\n'
                     f'all_model_checkpoint_paths: "{prefix.name}"\n')
    assert sorted(p.name for p in prefix.parent.iterdir()) == sorted(
        ["checkpoint", f"{prefix.name}.index", f"{prefix.name}.data-00000-of-00001"])  # no temp files


def test_write_replaces_existing_checkpoint_state(tmp_path):
    write_checkpoint(tmp_path / "model.ckpt-1", {"a": np.zeros(2, np.float32)})
    write_checkpoint(tmp_path / "model.ckpt-2", {"a": np.ones(2, np.float32)})
    assert resolve_checkpoint(tmp_path) == tmp_path / "model.ckpt-2"
    np.testing.assert_array_equal(read_checkpoint(tmp_path)["a"], np.ones(2, np.float32))


def test_write_refusals(tmp_path):
    with pytest.raises(TFCheckpointError, match="tensor x: values not exactly representable in bfloat16"):
        write_checkpoint(tmp_path / "m", {"x": np.array([1.0 + 2**-10], np.float32)}, dtypes={"x": "bfloat16"})
    with pytest.raises(TFCheckpointError, match="tensor x: cannot write dtype bool"):
        write_checkpoint(tmp_path / "m", {"x": np.array([True])})
    with pytest.raises(TFCheckpointError, match="tensor x: array is float32 but dtype float16"):
        write_checkpoint(tmp_path / "m", {"x": np.zeros(1, np.float32)}, dtypes={"x": "float16"})
    with pytest.raises(TFCheckpointError, match="must not be empty"):
        write_checkpoint(tmp_path / "m", {"": np.zeros(1, np.float32)})
    with pytest.raises(TFCheckpointError, match=r"dtypes names tensors not being written: \['y'\]"):
        write_checkpoint(tmp_path / "m", {"x": np.zeros(1, np.float32)}, dtypes={"y": "bfloat16"})
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_write_bfloat16_and_non_contiguous(tmp_path):
    rng = np.random.default_rng(0)
    bf16 = (rng.standard_normal((3, 4)).astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32)
    strided = rng.standard_normal((4, 6)).astype(np.float32)[:, ::2]
    big_endian = np.arange(5, dtype=">i8")
    write_checkpoint(tmp_path / "m", {"b": bf16, "s": strided, "e": big_endian}, dtypes={"b": "bfloat16"})
    reader = BundleReader(tmp_path / "m")
    assert reader.dtype("b") == "bfloat16" and reader.dtype("e") == "int64"
    assert reader.read("b").tobytes() == bf16.tobytes()
    np.testing.assert_array_equal(reader.read("s"), strided)
    np.testing.assert_array_equal(reader.read("e"), np.arange(5))


def test_multi_block_table_round_trip():
    entries = [(f"layer_{i:04d}/some/long/variable/name".encode(), bytes([i % 256]) * (i % 7))
               for i in range(500)]
    data = build_table(entries, block_size=512)
    assert read_table(data, "t.index") == entries
    assert len(data) > 512 * 10  # many data blocks, each with several restart points


# ---------------------------------------------------------------------------------------------
# TensorFlow reads what we write (skips without TensorFlow, as in CI; see make_tf_fixtures.py).

@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="tensorflow not installed")
def test_tensorflow_reads_our_checkpoint(tmp_path):
    import tensorflow as tf

    reader = BundleReader(FIXTURES / "dtypes")
    values = read_checkpoint(FIXTURES / "dtypes") | read_checkpoint(FIXTURES / "groups")
    prefix = tmp_path / "model.ckpt-5"
    write_checkpoint(prefix, values, dtypes=_stored_dtypes(reader))
    assert tf.train.latest_checkpoint(str(tmp_path)) == str(prefix)
    theirs = tf.train.load_checkpoint(str(prefix))
    assert theirs.get_variable_to_shape_map() == {n: list(v.shape) for n, v in values.items()}
    for name, value in values.items():
        got = theirs.get_tensor(name)
        if name.startswith("bfloat16"):
            assert got.dtype.name == "bfloat16"
            got = got.astype(np.float32)
        assert got.dtype == value.dtype and got.tobytes() == value.tobytes(), name


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="tensorflow not installed")
def test_multi_block_index_matches_tensorflow(tmp_path):
    import tensorflow as tf

    # 5,000 long names that share little: the index outgrows TF's 256 KiB block size, so it has
    # several data blocks and index keys shortened between them.
    rng = np.random.default_rng(0)
    names = ["".join(rng.choice(list("abcdefgh/_"), size=100)) + f"/{i}" for i in range(5000)]
    values = {n: np.full((i % 3,), i, np.float32) for i, n in enumerate(names)}
    order = sorted(values)
    tf.raw_ops.SaveV2(prefix=str(tmp_path / "tf"), tensor_names=order, shape_and_slices=[""] * len(order),
                      tensors=[tf.constant(values[n]) for n in order])
    write_checkpoint(tmp_path / "ours", values)
    assert len(index_filename(tmp_path / "tf").read_bytes()) > 2 * 262144
    assert index_filename(tmp_path / "ours").read_bytes() == index_filename(tmp_path / "tf").read_bytes()
    assert read_checkpoint(tmp_path / "tf").keys() == values.keys()


# ---------------------------------------------------------------------------------------------
# Damaged and unsupported files: one-line errors naming the file and, where known, the tensor.

def one_line_error(exc_info) -> str:
    message = str(exc_info.value)
    assert "\n" not in message
    return message


def rewrite_index(prefix: Path, change) -> None:
    """Re-encode a checkpoint's index with `change(key, value) -> value` applied (CRCs stay valid)."""
    path = index_filename(prefix)
    entries = read_table(path.read_bytes(), path.name)
    path.write_bytes(build_table([(key, change(key, value)) for key, value in entries]))


def header(num_shards: int = 1, endianness: int = 0) -> bytes:
    out = field_varint(1, num_shards) + (field_varint(2, endianness) if endianness else b"")
    return out + field_bytes(3, field_varint(1, 1))


def test_truncated_index(tmp_path):
    prefix = copy_fixture("google", tmp_path) / "model.ckpt-best"
    index = index_filename(prefix)
    data = index.read_bytes()
    index.write_bytes(data[:-10])
    with pytest.raises(TFCheckpointError) as exc:
        BundleReader(prefix)
    assert "model.ckpt-best.index: no table magic number" in one_line_error(exc)
    index.write_bytes(data[:30])
    with pytest.raises(TFCheckpointError) as exc:
        BundleReader(prefix)
    assert "model.ckpt-best.index: 30 bytes, shorter than a table footer" in one_line_error(exc)
    index.write_bytes(data[:200] + data[-48:])  # footer intact, blocks cut away
    with pytest.raises(TFCheckpointError) as exc:
        BundleReader(prefix)
    assert "model.ckpt-best.index: block at offset" in one_line_error(exc)
    assert "runs past the end" in one_line_error(exc)


def test_truncated_data(tmp_path):
    prefix = copy_fixture("google", tmp_path) / "model.ckpt-best"
    shard = data_filename(prefix, 0, 1)
    shard.write_bytes(shard.read_bytes()[:-100])
    with pytest.raises(TFCheckpointError) as exc:
        BundleReader(prefix)
    message = one_line_error(exc)
    # The last tensor in the file is the one cut: checked against the shard size before reading.
    assert message.startswith("model.ckpt-best.data-00000-of-00001: tensor cls/seq_relationship/output_weights: ")
    assert "(truncated)" in message


def test_flipped_byte_in_data_names_the_tensor(tmp_path):
    prefix = copy_fixture("google", tmp_path) / "model.ckpt-best"
    shard = data_filename(prefix, 0, 1)
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    reader = BundleReader(prefix)  # the index is intact; the damage shows when that tensor is read
    failed = []
    for name in reader.names():
        try:
            reader.read(name)
        except TFCheckpointError as err:
            failed.append((name, str(err)))
    assert len(failed) == 1
    name, message = failed[0]
    assert message == f"model.ckpt-best.data-00000-of-00001: tensor {name}: checksum mismatch (file corrupt)"
    with pytest.raises(TFCheckpointError, match="checksum mismatch"):
        read_checkpoint(prefix)


def test_flipped_byte_in_index_block(tmp_path):
    prefix = copy_fixture("google", tmp_path) / "model.ckpt-best"
    index = index_filename(prefix)
    data = bytearray(index.read_bytes())
    data[100] ^= 0x20  # inside a tensor name in the first data block
    index.write_bytes(bytes(data))
    with pytest.raises(TFCheckpointError) as exc:
        BundleReader(prefix)
    assert one_line_error(exc) == "model.ckpt-best.index: block at offset 0: checksum mismatch (file corrupt)"


def test_missing_shard_and_missing_index(tmp_path):
    folder = copy_fixture("google", tmp_path)
    data_filename(folder / "model.ckpt-best", 0, 1).unlink()
    with pytest.raises(TFCheckpointError) as exc:
        BundleReader(folder)
    assert one_line_error(exc) == ("model.ckpt-best.index: names 1 data shards but "
                                   "model.ckpt-best.data-00000-of-00001 is missing")
    index_filename(folder / "model.ckpt-best").unlink()
    with pytest.raises(TFCheckpointError) as exc:
        BundleReader(folder)  # the state file names a checkpoint that is gone
    assert "names checkpoint 'model.ckpt-best' but" in one_line_error(exc)
    with pytest.raises(TFCheckpointError) as exc:
        BundleReader(folder / "model.ckpt-best")
    assert "model.ckpt-best.index does not exist" in one_line_error(exc)


def test_more_shards_than_files(tmp_path):
    prefix = copy_fixture("dtypes", tmp_path) / "model.ckpt-7"
    rewrite_index(prefix, lambda key, value: header(num_shards=2) if key == b"" else value)
    with pytest.raises(TFCheckpointError) as exc:
        BundleReader(prefix)
    assert one_line_error(exc) == "model.ckpt-7.index: names 2 data shards but model.ckpt-7.data-00000-of-00002 is missing"


def test_big_endian_bundle_refused(tmp_path):
    prefix = copy_fixture("dtypes", tmp_path) / "model.ckpt-7"
    assert parse_message(read_table(index_filename(prefix).read_bytes(), "x")[0][1]) == parse_message(header())
    rewrite_index(prefix, lambda key, value: header(endianness=1) if key == b"" else value)
    with pytest.raises(UnsupportedCheckpointError) as exc:
        BundleReader(prefix)
    assert one_line_error(exc).startswith("model.ckpt-7.index: big-endian bundle")


def test_unknown_dtype_refused(tmp_path):
    write_checkpoint(tmp_path / "m", {"a": np.zeros(3, np.float32), "b": np.ones(2, np.float32)})
    # A BundleEntryProto starts with field 1 (dtype): 0x08 then the code (DT_FLOAT = 1).
    rewrite_index(tmp_path / "m", lambda key, value: b"\x08\x63" + value[2:] if key == b"a" else value)
    reader = BundleReader(tmp_path / "m")
    with pytest.raises(UnsupportedCheckpointError) as exc:
        reader.read("a")
    assert one_line_error(exc).startswith("m.index: tensor a has dtype unknown dtype code 99; supported:")
    np.testing.assert_array_equal(reader.read("b"), np.ones(2, np.float32))


def test_entry_sizes_checked_before_reading(tmp_path):
    write_checkpoint(tmp_path / "m", {"a": np.zeros(3, np.float32)})
    entry = read_table(index_filename(tmp_path / "m").read_bytes(), "x")[1][1]
    fields = parse_message(entry)
    huge = field_varint(1, 1) + field_bytes(2, field_bytes(2, field_varint(1, 2**40)))
    rewrite_index(tmp_path / "m", lambda key, value: huge + field_varint(5, 4 * 2**40) + field_fixed32(6, fields[6][0])
                  if key == b"a" else value)
    with pytest.raises(TFCheckpointError) as exc:
        BundleReader(tmp_path / "m")  # no 4 TiB allocation: the range is checked against the file
    assert one_line_error(exc).startswith("m.data-00000-of-00001: tensor a: bytes 0..4398046511104 lie past the end")
    rewrite_index(tmp_path / "m", lambda key, value: entry.replace(field_varint(5, 12), field_varint(5, 8))
                  if key == b"a" else value)
    with pytest.raises(TFCheckpointError) as exc:
        BundleReader(tmp_path / "m")
    assert one_line_error(exc) == "m.index: tensor a: 8 bytes for shape [3] float32 (expected 12; corrupt)"


def test_compressed_block_refused(tmp_path):
    write_checkpoint(tmp_path / "m", {"a": np.zeros(3, np.float32)})
    index = index_filename(tmp_path / "m")
    data = bytearray(index.read_bytes())
    # The first data block starts at 0; its handle in the index block gives its size.
    footer = data[-48:]
    _, _, pos = read_block_handle(bytes(footer), 0)
    index_offset, index_size, _ = read_block_handle(bytes(footer), pos)
    index_block = bytes(data[index_offset:index_offset + index_size])
    key_len = index_block[1]
    size = read_block_handle(index_block, 3 + key_len)[1]
    data[size] = 1  # compression type: Snappy
    data[size + 1:size + 5] = masked_crc32c(bytes(data[:size + 1])).to_bytes(4, "little")
    index.write_bytes(bytes(data))
    with pytest.raises(UnsupportedCheckpointError) as exc:
        BundleReader(tmp_path / "m")
    assert one_line_error(exc).startswith("m.index: block at offset 0 is compressed (type 1)")
