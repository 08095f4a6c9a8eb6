"""The sentence vector of the sentence-level heads: mean pooling over the real tokens (config.json's
`classifier_pooling`) and the pooler's re-initialisation (`--pooler-reinit`); both off by default."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from albertlm.cli import main
from albertlm.config import AlbertConfig, get_preset
from albertlm.errors import AlbertlmError, ConfigError
from albertlm.heads import AlbertForMultipleChoice, AlbertForSequenceClassification
from albertlm.interop.hf import transformers_can_load
from albertlm.pooling import mean_pool
from albertlm.tasks.registry import get_task
from albertlm.inference.load import load_tokenizer
from albertlm.train.finetune import FinetuneRecipe, finetune, new_head, prepare_task

from test_finetune import model_dir, write_sst  # noqa: F401  (model_dir is a fixture)

MEAN = get_preset("test", classifier_pooling="mean", classifier_dropout_prob=0.0)


def padded(ids: torch.Tensor, lengths: list[int], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of `ids` cut to `lengths` and padded (id 0, mask 0) to `width` columns."""
    out = torch.zeros(len(ids), width, dtype=torch.long)
    mask = torch.zeros(len(ids), width, dtype=torch.long)
    for i, n in enumerate(lengths):
        out[i, :n], mask[i, :n] = ids[i, :n], 1
    return out, mask


def test_mean_pooling_ignores_padding():
    model = AlbertForSequenceClassification(MEAN).eval()
    ids = torch.randint(5, MEAN.vocab_size, (3, 9), generator=torch.Generator().manual_seed(0))
    lengths = [9, 5, 2]
    with torch.no_grad():
        tight = model(*padded(ids, lengths, 9)).logits
        loose = model(*padded(ids, lengths, 20)).logits  # 11 more padding columns on every row
        alone = torch.cat([model(ids[i:i + 1, :n]).logits for i, n in enumerate(lengths)])  # no padding at all
    assert torch.allclose(tight, loose, atol=1e-6) and torch.allclose(tight, alone, atol=1e-6)
    h = torch.randn(2, 4, 3)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    assert torch.allclose(mean_pool(h, mask), torch.stack([h[0, :2].mean(0), h[1].mean(0)]))
    assert torch.equal(mean_pool(h, torch.zeros(2, 4)), torch.zeros(2, 3))  # a row of padding only


def test_mean_pooling_classifies_the_mean_not_the_pooler():
    cls = AlbertForSequenceClassification(MEAN.replace(classifier_pooling="cls")).eval()
    mean = AlbertForSequenceClassification(MEAN).eval()
    assert cls.albert.pooler is not None and mean.albert.pooler is None
    assert not any("pooler" in k for k in mean.state_dict())
    mean.load_state_dict({k: v for k, v in cls.state_dict().items() if "pooler" not in k})
    ids, mask = padded(torch.randint(5, MEAN.vocab_size, (2, 7), generator=torch.Generator().manual_seed(1)),
                       [7, 4], 7)
    with torch.no_grad():
        h = cls.albert(ids, mask).last_hidden_state
        assert torch.allclose(mean(ids, mask).logits, cls.classifier(mean_pool(h, mask)), atol=1e-6)
        assert not torch.allclose(mean(ids, mask).logits, cls(ids, mask).logits, atol=1e-3)
    choice = AlbertForMultipleChoice(MEAN).eval()  # the other sentence-level head pools the same way
    assert choice.albert.pooler is None
    with torch.no_grad():
        a = choice(ids[None], mask[None]).logits
        b = choice.classifier(mean_pool(choice.albert(ids, mask).last_hidden_state, mask)).view(1, 2)
    assert torch.allclose(a, b, atol=1e-6)


def test_the_config_round_trips_and_the_default_is_not_written(tmp_path):
    MEAN.to_json_file(tmp_path / "config.json")
    assert json.loads((tmp_path / "config.json").read_text())["classifier_pooling"] == "mean"
    assert AlbertConfig.from_json_file(tmp_path / "config.json") == MEAN
    plain = get_preset("test")
    assert plain.classifier_pooling == "cls" and "classifier_pooling" not in plain.to_dict()
    assert AlbertConfig.from_dict(plain.to_dict()) == plain
    with pytest.raises(ConfigError, match=r"^x: classifier_pooling 'max' is unknown; choose one of cls, mean$"):
        AlbertConfig.from_dict({**plain.to_dict(), "classifier_pooling": "max"}, source="x")
    assert transformers_can_load(plain) and not transformers_can_load(MEAN)


def test_a_saved_mean_head_reloads_here_and_transformers_refuses_it(tmp_path):
    model = AlbertForSequenceClassification(MEAN).eval()
    model.save_pretrained(tmp_path)
    again = AlbertForSequenceClassification.from_pretrained(tmp_path).eval()
    assert again.config.classifier_pooling == "mean"
    ids, mask = padded(torch.randint(5, MEAN.vocab_size, (2, 6), generator=torch.Generator().manual_seed(2)), [6, 3], 6)
    with torch.no_grad():
        assert torch.equal(model(ids, mask).logits, again(ids, mask).logits)
    tf = pytest.importorskip("transformers")
    with pytest.raises(Exception) as err:  # it would load and classify the pooler's [CLS] vector
        tf.AlbertForSequenceClassification.from_pretrained(tmp_path)
    assert "classifier_pooling='mean' cannot be expressed by transformers" in str(err.value)


# ---------------------------------------------------------------------------- through the recipe
@pytest.fixture(scope="module")
def sst(tmp_path_factory) -> Path:
    data = tmp_path_factory.mktemp("sst")
    write_sst(data, random.Random(3))
    return data


def head(model_dir: Path, data: Path, **recipe) -> torch.nn.Module:
    spec, base = get_task("sst-2"), AlbertConfig.from_json_file(model_dir / "config.json")
    run = prepare_task(spec, data, FinetuneRecipe(max_seq_length=32, **recipe), load_tokenizer(model_dir), base)
    return new_head(run, model_dir, base)


def test_pooler_reinit_changes_only_the_pooler(model_dir, sst):  # noqa: F811
    plain, fresh = head(model_dir, sst).state_dict(), head(model_dir, sst, pooler_reinit=True).state_dict()
    assert plain.keys() == fresh.keys()
    changed = {k for k in plain if not torch.equal(plain[k], fresh[k])}
    assert changed == {"albert.pooler.weight"}  # the pretrained pooler's bias was zero already
    assert not fresh["albert.pooler.bias"].any()
    assert fresh["albert.pooler.weight"].std().item() == pytest.approx(0.02, rel=0.1)
    again = head(model_dir, sst, pooler_reinit=True).state_dict()
    assert all(torch.equal(fresh[k], again[k]) for k in fresh)  # seeded
    other = head(model_dir, sst, pooler_reinit=True, seed=1).state_dict()["albert.pooler.weight"]
    assert not torch.equal(other, fresh["albert.pooler.weight"])


def test_a_mean_pooled_run_evaluates_and_predicts_as_it_trained(model_dir, sst, tmp_path, capsys):  # noqa: F811
    recipe = FinetuneRecipe(lr=3e-3, batch_size=16, steps=30, warmup_steps=3, eval_every=10, max_seq_length=32,
                            classifier_pooling="mean")
    results = finetune("sst-2", model_dir, sst, tmp_path / "out", recipe, progress=False)
    assert results["transformers_loads"] is False and results["recipe"]["classifier_pooling"] == "mean"
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["classifier_pooling"] == "mean" and "layer_types" in config
    assert main(["evaluate", "--model", str(tmp_path / "out"), "--data", str(sst), "--json", "--device", "cpu",
                 "--predictions", str(tmp_path / "again.tsv")]) == 0
    scored = json.loads(capsys.readouterr().out)["metrics"]
    assert scored["accuracy"] == pytest.approx(results["best"]["accuracy"], abs=1e-9)
    assert (tmp_path / "again.tsv").read_text() == (tmp_path / "out" / "predictions_dev.tsv").read_text()


def test_the_flags_are_in_the_help(capsys):
    with pytest.raises(SystemExit):
        main(["finetune", "--help"])
    shown = capsys.readouterr().out
    assert "--classifier-pooling" in shown and "--pooler-reinit" in shown
    with pytest.raises(SystemExit):
        main(["distill", "--help"])
    shown = capsys.readouterr().out
    assert "--classifier-pooling" in shown and "--pooler-reinit" not in shown


@pytest.mark.parametrize("changes,message", [
    ({"classifier_pooling": "max"}, "classifier_pooling must be one of cls, mean, got 'max'"),
    ({"classifier_pooling": "mean", "pooler_reinit": True}, "--classifier-pooling mean has no pooler: it does not "
                                                            "go with --pooler-reinit"),
    ({"classifier_pooling": "mean", "early_exit": True}, "it does not go with --early-exit"),
])
def test_the_recipe_refuses_what_does_not_go_together(changes, message):
    with pytest.raises(AlbertlmError, match=message):
        FinetuneRecipe(**changes)


def test_a_head_without_a_sentence_vector_is_refused_in_one_line(model_dir, tmp_path, capsys):  # noqa: F811
    code = main(["finetune", "--task", "conll2003", "--model", str(model_dir), "--data", str(tmp_path),
                 "--out", str(tmp_path / "out"), "--classifier-pooling", "mean", "--device", "cpu"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and ("--classifier-pooling mean: task conll2003 uses an AlbertForTokenClassification, "
                                     "which has no sentence vector") in err


def test_exit_heads_refuse_a_mean_pooled_config():
    from albertlm.exit_heads import EarlyExitSequenceClassifier

    with pytest.raises(AlbertlmError, match="^exit heads classify the pooler's \\[CLS\\] vector; "
                                            "classifier_pooling='mean' has no pooler$"):
        EarlyExitSequenceClassifier(MEAN)


def test_distill_refuses_the_pooler_reinit_and_mean_pooling_for_tags(tmp_path):
    from albertlm.train.distill import distill

    with pytest.raises(AlbertlmError, match="^--pooler-reinit: a distillation student keeps the pooler"):
        distill("sst-2", tmp_path, "test", tmp_path, tmp_path / "out", FinetuneRecipe(pooler_reinit=True))
    with pytest.raises(AlbertlmError, match="^--classifier-pooling mean: task conll2003 uses an "
                                            "AlbertForTokenClassification"):
        distill("conll2003", tmp_path, "test", tmp_path, tmp_path / "out", FinetuneRecipe(classifier_pooling="mean"))
    assert not (tmp_path / "out").exists()
