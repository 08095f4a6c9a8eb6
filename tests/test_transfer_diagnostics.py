"""experiments.transfer_diagnostics on a tiny model and synthetic SST-2 files (its plumbing, not its findings)."""

import json
import random

import pytest
import torch

from albertlm import AlbertConfig, AlbertForPreTraining
from albertlm.tokenizer import Tokenizer, train_tokenizer

POS, NEG = "good great fun lovely".split(), "bad awful boring dull".split()
FILL = "the movie was a film plot actor story and it very".split()


@pytest.fixture(scope="module")
def diag():
    from experiments import transfer_diagnostics

    return transfer_diagnostics


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """(model directory, SST-2-style data folder): a tiny random ALBERT and labelled sentences."""
    root = tmp_path_factory.mktemp("diag")
    r = random.Random(0)
    data = root / "SST-2"
    data.mkdir()
    for split, n in (("train", 120), ("dev", 40)):
        rows = ["sentence\tlabel"]
        for _ in range(n):
            y = r.randint(0, 1)
            rows.append(" ".join([*r.choices(FILL, k=3), r.choice(POS if y else NEG), *r.choices(FILL, k=2)]) + f"\t{y}")
        (data / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    model = root / "model"
    corpus = [" ".join(r.choices(POS + NEG + FILL, k=10)) for _ in range(300)]
    train_tokenizer(corpus, model, vocab_size=60, log=lambda msg: None)
    config = AlbertConfig(vocab_size=Tokenizer.load(model).vocab_size, embedding_size=16, hidden_size=32,
                          num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(1)  # the control is drawn with --seed 0: other weights
    AlbertForPreTraining(config).save_pretrained(model)
    return model, data


def test_report_on_tiny_model(diag, setup, tmp_path, monkeypatch):
    import tempfile

    model, data = setup
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where the control's copy is made
    out = tmp_path / "d.json"
    assert diag.main(["--model", str(model), "--data", str(data), "--train-examples", "100",
                      "--max-seq-length", "16", "--out", str(out)]) == 0
    report = json.loads(out.read_text())["results"]
    assert report["train_examples"] == 100 and report["dev_examples"] == 40
    assert report["loading"]["max_abs_diff"] == 0.0 and report["loading"]["compared_tensors"] > 10
    assert sorted(report["loading"]["head_only"]) == ["classifier.bias", "classifier.weight"]
    for arm in ("pretrained", "control"):
        assert len(report[arm]["layer_norms_train"]) == 3  # embeddings output + 2 layers
        assert all(0.0 <= v <= 100.0 for v in report[arm]["probe_dev_accuracy"].values())
        assert all(-1.0 <= v <= 1.0 for v in report[arm]["mean_cosine_dev"].values())
        assert set(report[arm]["first_step"]["grad_norms"]) == {"embeddings", "project", "encoder", "pooler", "classifier"}
    # the control has other weights than the model it copies
    assert report["pretrained"]["first_step"]["weight_norms"] != report["control"]["first_step"]["weight_norms"]
    assert not any(p.name.startswith("reinit-") for p in model.parent.iterdir())
    assert not list(scratch.glob("reinit-*"))  # the control's temporary copy is removed


def test_loading_check_sees_a_changed_tensor(diag, setup):
    model, _ = setup
    head = AlbertForPreTraining.from_pretrained(model)
    assert diag.loading_check(head, model)["max_abs_diff"] == 0.0
    with torch.no_grad():
        head.albert.pooler.weight.add_(0.5)
    assert diag.loading_check(head, model)["max_abs_diff"] == pytest.approx(0.5)


def test_mean_cosine_and_probe(diag):
    same = torch.ones(5, 3)
    assert diag.mean_cosine(same) == pytest.approx(1.0)
    assert diag.mean_cosine(torch.eye(4)) == pytest.approx(0.0)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 4, generator=g)
    y = (x[:, 0] > 0).long()
    assert diag.probe(x[:150], y[:150], x[150:], y[150:]) >= 95.0
