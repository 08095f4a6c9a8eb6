"""`albertlm compress`: the surgery's exactness, the shared and pruned blocks, and the run end to end.

Surgery is checked where it must be exact: E = H loses nothing, and at E < H a teacher whose centred
embedding sums lie in an (E-1)-dimensional subspace loses nothing either; pruning FFN neurons whose
output columns are zero changes nothing. The run: a tiny random BERT written by transformers,
compressed through the CLI, gives a plain ALBERT directory that transformers loads with the same
outputs; a run killed after a checkpoint resumes to the same weights as one never killed; the
refusals are one line each.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from albertlm.cli import main
from albertlm.compress import surgery
from albertlm.compress.run import CompressRecipe, compress
from albertlm.compress.teacher import load_teacher
from albertlm.compress.text import encode, examples
from albertlm.config import AlbertConfig
from albertlm.data.corpus import Corpus
from albertlm.errors import AlbertlmError
from albertlm.model import AlbertModel
from albertlm.outputs import OutputDir
from test_interop_bert import save_bert
from test_interop_hf import randomise
from test_wordpiece import ENTRIES, TEXTS

tf = pytest.importorskip("transformers")


def unshared(seed: int = 0, layers: int = 4, H: int = 32) -> AlbertModel:
    """A random unshared E == H backbone (a BERT's shape), with dropout off."""
    config = AlbertConfig(vocab_size=40, embedding_size=H, hidden_size=H, num_hidden_layers=layers, sharing="none",
                          num_attention_heads=4, intermediate_size=48, max_position_embeddings=24,
                          hidden_act="gelu")
    torch.manual_seed(seed)
    return randomise(AlbertModel(config), seed=seed).eval()


def batch(vocab: int = 40, seed: int = 1) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (3, 9), generator=g)
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, 6:] = 0
    types = torch.zeros(3, 9, dtype=torch.long)
    types[:, 4:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def outputs(model: AlbertModel, b: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        h = model(b["input_ids"], b["attention_mask"], b["token_type_ids"]).last_hidden_state
    return h[b["attention_mask"].bool()]


def all_tokens(model: AlbertModel) -> list[dict[str, torch.Tensor]]:
    """Every (word, position, type) combination once: the sums the subspace must hold."""
    V, P = model.config.vocab_size, model.config.max_position_embeddings
    ids = torch.arange(V)[:, None].expand(V, P)
    return [{"input_ids": ids, "attention_mask": torch.ones(V, P, dtype=torch.long),
             "token_type_ids": torch.full((V, P), t)} for t in (0, 1)]


# ---------------------------------------------------------------------------- surgery
def test_the_zero_sum_basis_is_orthonormal_and_sums_to_zero():
    M = surgery.zero_sum_basis(7)
    assert torch.allclose(M.T @ M, torch.eye(6, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(M.sum(0), torch.zeros(6, dtype=torch.float64), atol=1e-12)


def test_factorizing_at_the_hidden_size_loses_nothing():
    teacher = unshared()
    student = surgery.factorize_embeddings(teacher, 32, surgery.embedding_sums(teacher, all_tokens(teacher)))
    assert student.config.embedding_size == 32
    assert (outputs(student, batch()) - outputs(teacher, batch())).abs().max() < 1e-5


def test_factorizing_a_low_rank_embedding_loses_nothing():
    """Centred tables inside a 7-dimensional subspace: E = 8 holds them exactly (and E = 6 cannot)."""
    teacher = unshared(seed=3)
    basis = torch.linalg.qr(torch.randn(32, 7, generator=torch.Generator().manual_seed(5)))[0]  # [H, 7]
    basis = basis - basis.mean(0, keepdim=True)  # centred directions: LayerNorm's input space
    with torch.no_grad():
        for table in (teacher.embeddings.word, teacher.embeddings.position, teacher.embeddings.token_type):
            coeffs = torch.randn(table.weight.shape[0], 7, generator=torch.Generator().manual_seed(6))
            table.weight.copy_(coeffs @ basis.T + 0.3)  # plus a constant, which LayerNorm removes
    sums = surgery.embedding_sums(teacher, all_tokens(teacher))
    exact = surgery.factorize_embeddings(teacher, 8, sums)
    assert exact.embeddings.word.weight.shape == (40, 8) and exact.project.weight.shape == (32, 8)
    assert (outputs(exact, batch()) - outputs(teacher, batch())).abs().max() < 1e-4
    short = surgery.factorize_embeddings(teacher, 6, sums)
    assert (outputs(short, batch()) - outputs(teacher, batch())).abs().max() > 1e-2


def test_factorizing_refuses_a_factorized_model_and_bad_sizes():
    teacher = unshared()
    sums = surgery.embedding_sums(teacher, all_tokens(teacher))
    with pytest.raises(AlbertlmError, match="between 2 and the hidden size"):
        surgery.factorize_embeddings(teacher, 33, sums)
    small = surgery.factorize_embeddings(teacher, 8, sums)
    with pytest.raises(AlbertlmError, match="factorized already"):
        surgery.factorize_embeddings(small, 4, sums)


@pytest.mark.parametrize("init", surgery.SHARE_INITS)
def test_shared_groups_start_from_the_layers_they_replace(init):
    teacher = unshared()
    student = surgery.share_layers(teacher, 2, init, torch.Generator().manual_seed(0))
    assert student.config.num_attention_blocks == 2 and student.config.block_schedule() == [(0, 0), (0, 0), (1, 1), (1, 1)]
    t, s = teacher.state_dict(), student.state_dict()
    for g, layers in ((0, (0, 1)), (1, (2, 3))):
        for rest in ("qkv.weight", "out.bias", "norm.weight"):
            got = s[f"encoder.attention.{g}.{rest}"]
            mean = torch.stack([t[f"encoder.attention.{i}.{rest}"] for i in layers]).mean(0)
            if init == "average":
                assert torch.equal(got, mean)
            elif init == "stepwise":
                assert torch.equal(got, t[f"encoder.attention.{layers[0]}.{rest}"])
            else:
                assert not torch.equal(got, mean)
                assert torch.equal(got, torch.ones_like(got)) if rest == "norm.weight" else True
    assert torch.equal(s["embeddings.word.weight"], t["embeddings.word.weight"])


def test_sharing_is_parsed_and_checked():
    assert surgery.parse_sharing("all", 6) == ("all", 1)
    assert surgery.parse_sharing("groups:3", 6) == ("all", 3)
    assert surgery.parse_sharing("none", 6) == ("none", 6)
    for bad in ("groups:4", "groups:x", "some"):
        with pytest.raises(AlbertlmError, match="--sharing"):
            surgery.parse_sharing(bad, 6)


def test_pruning_neurons_that_do_nothing_changes_nothing():
    teacher = unshared()
    with torch.no_grad():
        for block in teacher.encoder.ffn:
            block.down.weight[:, 20:] = 0.0  # neurons 20.. write nothing
    importance = surgery.ffn_importance(teacher, [batch()])
    assert all(float(scores[20:].abs().max()) == 0.0 and float(scores[:20].min()) > 0 for scores in importance)
    pruned = surgery.prune_ffn(teacher, 20, importance)
    assert pruned.config.intermediate_size == 20 and pruned.encoder.ffn[0].up.weight.shape == (20, 32)
    assert (outputs(pruned, batch()) - outputs(teacher, batch())).abs().max() < 1e-6
    with pytest.raises(AlbertlmError, match="--ffn-size"):
        surgery.prune_ffn(teacher, 49, importance)


def test_examples_are_a_pure_function_of_the_seed(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("".join(f"sentence number {i}.\n" + ("\n" if i % 3 == 2 else "") for i in range(60)))
    held, stream = examples(Corpus(str(text)), seed=0, pair_fraction=0.5, heldout=5)
    first = [next(stream) for _ in range(80)]  # more than one pass
    held2, stream2 = examples(Corpus(str(text)), seed=0, pair_fraction=0.5, heldout=5)
    assert held == held2 and first == [next(stream2) for _ in range(80)]
    assert any(b is not None for _, b in first) and any(b is None for _, b in first)
    assert not set(held) & set(first[: len(first) - 45])  # the first pass trains on what is not held out
    _, other = examples(Corpus(str(text)), seed=1, pair_fraction=0.5, heldout=5)
    assert [next(other) for _ in range(20)] != first[:20]


# ---------------------------------------------------------------------------- the run
@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory) -> Path:
    """A tiny random BertModel with its WordPiece tokenizer, as transformers saves it."""
    root = tmp_path_factory.mktemp("teacher")
    save_bert(root / "bert", "BertModel", ENTRIES, {"do_lower_case": True})
    return root / "bert"


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "text.txt"
    lines = [t for t in TEXTS for _ in range(3)]
    path.write_text("".join(f"{t}\n" + ("\n" if i % 4 == 3 else "") for i, t in enumerate(lines)), encoding="utf-8")
    return path


FLAGS = ["--embedding-size", "8", "--batch-size", "4", "--heldout", "4", "--sample-examples", "16",
         "--checkpoint-every", "2", "--learning-rate", "1e-3", "--no-progress"]


def run_cli(capsys, *argv) -> str:
    code = main([*map(str, argv)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


def test_compress_writes_a_plain_albert_that_transformers_loads(capsys, tmp_path, bert_dir, corpus_file):
    out = tmp_path / "small"
    printed = run_cli(capsys, "compress", bert_dir, "--out", out, "--corpus", corpus_file, "--steps", "12",
                      "--ffn-size", "20", *FLAGS)
    assert "student:" in printed and "held out:" in printed
    config = json.loads((out / "config.json").read_text())
    assert (config["embedding_size"], config["num_hidden_groups"], config["intermediate_size"]) == (8, 1, 20)
    assert config["architectures"] == ["AlbertModel"] and (out / "vocab.txt").is_file()
    record = json.loads((out / "compress.json").read_text())
    assert record["steps"] == 12 and record["student"]["parameters"] < record["teacher_parameters"]
    before, after = record["heldout"]["before"], record["heldout"]["after"]
    assert after["hidden_mse"] < before["hidden_mse"]  # distillation moved the student towards the teacher
    ours = AlbertModel.from_pretrained(out)
    theirs = tf.AlbertModel.from_pretrained(out).eval()
    b = batch(vocab=len(ENTRIES))
    with torch.no_grad():
        want = theirs(**b).last_hidden_state[b["attention_mask"].bool()]
    assert (outputs(ours, b) - want).abs().max() < 1e-5
    assert run_cli(capsys, "embed", out, "--input", corpus_file, "--output", tmp_path / "v.npy") is not None


def test_a_killed_run_resumes_to_the_same_weights(tmp_path, bert_dir, corpus_file):
    teacher = load_teacher(bert_dir)
    recipe = CompressRecipe(embedding_size=8, batch_size=4, heldout=4, sample_examples=16, checkpoint_every=2,
                            steps=7, learning_rate=1e-3)

    def run(out: Path, stop_after=None):
        return compress(teacher.model, teacher.vocabulary, Corpus(str(corpus_file)),
                        OutputDir(out, "compress", ("*",)), recipe, source={"path": "t"}, progress=False,
                        stop_after=stop_after, notice=lambda m: None)

    run(tmp_path / "whole")
    assert run(tmp_path / "killed", stop_after=3) == {"stopped_at": 3}
    assert not (tmp_path / "killed" / "model.safetensors").exists()
    resumed = run(tmp_path / "killed")  # from the step-2 checkpoint
    assert resumed["steps"] == 7
    a = AlbertModel.from_pretrained(tmp_path / "whole").state_dict()
    b = AlbertModel.from_pretrained(tmp_path / "killed").state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_different_recipe_on_the_same_out_is_refused(capsys, tmp_path, bert_dir, corpus_file):
    out = tmp_path / "o"
    run_cli(capsys, "compress", bert_dir, "--out", out, "--corpus", corpus_file, "--steps", "2", *FLAGS)
    assert main(["compress", str(bert_dir), "--out", str(out), "--corpus", str(corpus_file), "--steps", "3",
                 *FLAGS]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "another recipe" in err


@pytest.mark.parametrize("flags, message", [
    (["--sharing", "groups:2"], "divisor"),
    (["--embedding-size", "64"], "between 2 and the hidden size"),
    (["--embedding-size", "32", "--sharing", "none"], "nothing to compress"),
])
def test_bad_shapes_are_one_line(capsys, tmp_path, bert_dir, corpus_file, flags, message):
    assert main(["compress", str(bert_dir), "--out", str(tmp_path / "o"), "--corpus", str(corpus_file),
                 "--steps", "2", *FLAGS, *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_a_model_that_is_not_bert_or_albert_is_refused(capsys, tmp_path, corpus_file):
    src = tmp_path / "roberta"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"model_type": "roberta", "hidden_size": 32}))
    assert main(["compress", str(src), "--out", str(tmp_path / "o"), "--corpus", str(corpus_file)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "roberta" in err


def test_the_encoded_batch_fits_max_seq_length(bert_dir):
    vocabulary = load_teacher(bert_dir).vocabulary
    long = " ".join(TEXTS)
    b = encode(vocabulary, [(long, long), ("short", None)], 12)
    assert b["input_ids"].shape == (2, 12) and int(b["attention_mask"][1].sum()) < 12
    assert int(b["token_type_ids"][0].max()) == 1 and int(b["token_type_ids"][1].max()) == 0
