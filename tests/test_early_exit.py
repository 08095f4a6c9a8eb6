"""Patience-based early exit: the depth-weighted loss, the exit rule, batched = one at a time, the
saved directory (ours and transformers'), and the CLI end to end on the `test` preset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from albertlm import get_preset
from albertlm.errors import AlbertlmError
from albertlm.exit_heads import (CONFIG_KEY, EXIT_HEADS_NAME, EarlyExitSequenceClassifier, EarlyExitTokenClassifier,
                                 depth_weighted_loss, has_exit_heads)
from albertlm.heads import AlbertForSequenceClassification, AlbertForTokenClassification
from albertlm.inference.exit import PatienceExit, patience_forward
from albertlm.inference.load import load_model_dir, model_class, read_architecture


def _config(**changes):
    """The `test` preset (3 layer applications, all shared) without dropout."""
    return get_preset("test").replace(hidden_dropout_prob=0.0, classifier_dropout_prob=0.0, **changes)


def _batch(B: int = 5, S: int = 12, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ids [B, S] and a right-padded attention mask of mixed lengths (row 0 full length)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 128, (B, S), generator=g)
    lengths = torch.randint(3, S + 1, (B,), generator=g)
    lengths[0] = S
    mask = (torch.arange(S)[None] < lengths[:, None]).long()
    return ids * mask, mask


# ---------------------------------------------------------------------------- training
def test_depth_weighted_loss_is_the_formula():
    losses = [torch.tensor(1.0), torch.tensor(2.0), torch.tensor(3.0)]
    assert depth_weighted_loss(losses).item() == pytest.approx((1 * 1 + 2 * 2 + 3 * 3) / (1 + 2 + 3))
    assert depth_weighted_loss([torch.tensor(0.7)]).item() == pytest.approx(0.7)


def test_training_loss_weights_every_layers_cross_entropy():
    model = EarlyExitSequenceClassifier(_config()).eval()
    ids, mask = _batch()
    labels = torch.tensor([0, 1, 1, 0, 1])
    out = model(ids, mask, labels=labels)
    assert out.layer_logits.shape == (3, 5, 2)
    per_layer = [F.cross_entropy(logits, labels) for logits in out.layer_logits]
    expected = (per_layer[0] + 2 * per_layer[1] + 3 * per_layer[2]) / 6
    torch.testing.assert_close(out.loss, expected)
    # every layer's classifier is trained: each gets a gradient
    out.loss.backward()
    assert all(h.weight.grad is not None and h.weight.grad.abs().sum() > 0 for h in [*model.exits, model.classifier])


def test_layer_logits_are_each_layers_pooled_cls_through_its_classifier():
    model = EarlyExitSequenceClassifier(_config()).eval()
    ids, mask = _batch()
    out = model(ids, mask, output_hidden_states=True)
    for i, h in enumerate(out.hidden_states[1:]):
        head = model.exits[i] if i < 2 else model.classifier
        expected = head(torch.tanh(model.albert.pooler(h[:, 0])))
        torch.testing.assert_close(out.layer_logits[i], expected)


def test_final_logits_are_the_plain_heads():
    for exit_cls, plain_cls in ((EarlyExitSequenceClassifier, AlbertForSequenceClassification),
                                (EarlyExitTokenClassifier, AlbertForTokenClassification)):
        model = exit_cls(_config(num_labels=3)).eval()
        assert has_exit_heads(model.config) and len(model.exits) == 2
        plain = plain_cls(_config(num_labels=3)).eval()
        plain.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("exits.")})
        ids, mask = _batch()
        torch.testing.assert_close(model(ids, mask).logits, plain(ids, mask).logits)


def test_token_loss_ignores_unlabelled_positions():
    model = EarlyExitTokenClassifier(_config(num_labels=4)).eval()
    ids, mask = _batch()
    labels = torch.randint(0, 4, ids.shape).masked_fill(mask == 0, -100)
    out = model(ids, mask, labels=labels)
    per_layer = [F.cross_entropy(lg.reshape(-1, 4), labels.reshape(-1), ignore_index=-100) for lg in out.layer_logits]
    torch.testing.assert_close(out.loss, depth_weighted_loss(per_layer))


# ---------------------------------------------------------------------------- patience
def _set_layer_outputs(model, outputs: list[list[float]]) -> None:
    """Make layer i's classifier output `outputs[i]` for every input (zero weight, that bias)."""
    with torch.no_grad():
        for i, values in enumerate(outputs):
            head = model.exit_head(i)
            head.weight.zero_()
            head.bias.copy_(torch.tensor(values))


@pytest.mark.parametrize("patience, exit_layer", [(1, 3), (2, 4), (3, 6), (5, 6)])
def test_exits_once_the_prediction_has_held_for_patience_layers(patience, exit_layer):
    model = EarlyExitSequenceClassifier(_config(num_hidden_layers=6)).eval()
    # predicted classes per layer: 0 1 1 1 0 0 (the logits differ, the argmax repeats)
    outputs = [[1.0, 0.0], [0.0, 1.0], [0.0, 2.0], [0.0, 3.0], [4.0, 0.0], [5.0, 0.0]]
    _set_layer_outputs(model, outputs)
    ids, mask = _batch(B=3)
    out = patience_forward(model, ids, mask, patience=patience)
    assert out.exit_layers.tolist() == [exit_layer] * 3
    torch.testing.assert_close(out.logits, torch.tensor([outputs[exit_layer - 1]] * 3))


def test_regression_counts_small_changes_as_unchanged():
    model = EarlyExitSequenceClassifier(_config(num_hidden_layers=5, num_labels=1)).eval()
    _set_layer_outputs(model, [[0.0], [2.0], [2.05], [2.5], [2.52]])
    ids, mask = _batch(B=2)
    assert patience_forward(model, ids, mask, patience=1, regression_threshold=0.1).exit_layers.tolist() == [3, 3]
    assert patience_forward(model, ids, mask, patience=1, regression_threshold=0.01).exit_layers.tolist() == [5, 5]
    assert patience_forward(model, ids, mask, patience=1, regression_threshold=3.0).exit_layers.tolist() == [2, 2]


def test_multi_label_compares_the_set_of_labels():
    model = EarlyExitSequenceClassifier(_config(num_hidden_layers=4, num_labels=3,
                                                problem_type="multi_label_classification")).eval()
    _set_layer_outputs(model, [[1.0, -1.0, 1.0], [2.0, -2.0, 0.5], [1.0, 1.0, 1.0], [3.0, 2.0, 1.0]])
    ids, mask = _batch(B=2)
    assert patience_forward(model, ids, mask, patience=1).exit_layers.tolist() == [2, 2]
    assert patience_forward(model, ids, mask, patience=2).exit_layers.tolist() == [4, 4]


def _random_exit_model(cls, seed: int, **changes):
    """A 6-layer early-exit head whose classifiers are one large random matrix plus a per-layer
    perturbation: predictions mostly hold from layer to layer, so examples exit at different layers."""
    torch.manual_seed(seed)
    model = cls(_config(num_hidden_layers=6, **changes)).eval()
    shared = torch.randn_like(model.classifier.weight)
    with torch.no_grad():
        for i in range(6):
            model.exit_head(i).weight.copy_(shared + 0.3 * torch.randn_like(shared))
    return model


def _reference_exits(model, ids, mask, patience):
    """The exit rule applied to a full-depth forward's per-layer logits, one example at a time."""
    layer_logits = model(ids, mask).layer_logits  # [L, B, ...]
    L = layer_logits.shape[0]
    layers, logits = [], []
    for b in range(ids.shape[0]):
        real = mask[b].bool()
        preds = [lg[b][real].argmax(-1) if model.per_position else lg[b].argmax(-1) for lg in layer_logits]
        streak, exit_at = 0, L - 1
        for i in range(1, L):
            streak = streak + 1 if torch.equal(preds[i], preds[i - 1]) else 0
            if streak >= patience:
                exit_at = i
                break
        layers.append(exit_at + 1)
        logits.append(layer_logits[exit_at, b])
    return layers, logits


@pytest.mark.parametrize("cls", [EarlyExitSequenceClassifier, EarlyExitTokenClassifier])
@pytest.mark.parametrize("patience", [1, 2])
def test_batched_equals_the_rule_and_one_example_at_a_time(cls, patience):
    """Per example (token classification: per sentence, over its real tokens only), the batched run
    exits where the rule applied to a full-depth forward says, with that layer's logits, and so does
    the example run alone at batch 1 without padding."""
    model = _random_exit_model(cls, seed=patience, num_labels=3)
    ids, mask = _batch(B=12, S=14, seed=patience)
    out = patience_forward(model, ids, mask, patience=patience)
    layers, logits = _reference_exits(model, ids, mask, patience)
    assert out.exit_layers.tolist() == layers
    assert len(set(layers)) >= 2, "the test needs examples that exit at different layers"
    for b in range(ids.shape[0]):
        n = int(mask[b].sum())
        alone = patience_forward(model, ids[b:b + 1, :n], mask[b:b + 1, :n], patience=patience)
        assert alone.exit_layers.item() == layers[b]
        if model.per_position:  # real tokens only; padded columns are cut or zero
            torch.testing.assert_close(out.logits[b, :n], logits[b][:n], atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(alone.logits[0], logits[b][:n], atol=1e-5, rtol=1e-4)
        else:
            torch.testing.assert_close(out.logits[b], logits[b], atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(alone.logits[0], logits[b], atol=1e-5, rtol=1e-4)


def test_patience_of_all_layers_is_the_plain_model():
    model = _random_exit_model(EarlyExitSequenceClassifier, seed=3)
    plain = AlbertForSequenceClassification(_config(num_hidden_layers=6)).eval()
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("exits.")})
    ids, mask = _batch(B=6)
    for patience in (6, 9):
        out = patience_forward(model, ids, mask, patience=patience)
        assert out.exit_layers.tolist() == [6] * 6
        torch.testing.assert_close(out.logits, plain(ids, mask).logits, atol=1e-5, rtol=1e-4)


def test_patience_refusals():
    model = EarlyExitSequenceClassifier(_config())
    ids, mask = _batch(B=2)
    with pytest.raises(AlbertlmError, match="training mode"):
        patience_forward(model.train(), ids, mask, patience=1)
    with pytest.raises(AlbertlmError, match="positive integer"):
        patience_forward(model.eval(), ids, mask, patience=0)
    with pytest.raises(AlbertlmError, match="positive integer"):  # a bool is not a count, here as on the CLI
        PatienceExit(model, patience=True)
    with pytest.raises(AlbertlmError, match="no exit heads"):
        PatienceExit(AlbertForSequenceClassification(_config()), patience=1)


# ---------------------------------------------------------------------------- the directory
def test_save_then_load_restores_the_exit_heads(tmp_path):
    model = _random_exit_model(EarlyExitSequenceClassifier, seed=4, num_labels=3)
    model.save_pretrained(tmp_path)
    assert sorted(load_file(str(tmp_path / EXIT_HEADS_NAME))) == sorted(
        f"exits.{i}.{p}" for i in range(5) for p in ("weight", "bias"))
    assert not any(k.startswith("exits.") for k in load_file(str(tmp_path / "model.safetensors")))
    assert json.loads((tmp_path / "config.json").read_text())[CONFIG_KEY] == {"file": EXIT_HEADS_NAME, "heads": 5}
    arch, config = read_architecture(tmp_path)
    assert model_class(arch, config) is EarlyExitSequenceClassifier
    loaded = EarlyExitSequenceClassifier.from_pretrained(tmp_path)
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    ids, mask = _batch()
    a, b = (patience_forward(m, ids, mask, patience=1) for m in (model, loaded))
    assert torch.equal(a.exit_layers, b.exit_layers) and torch.equal(a.logits, b.logits)


def test_a_plain_directory_builds_the_plain_head(tmp_path):
    AlbertForSequenceClassification(_config()).save_pretrained(tmp_path)
    arch, config = read_architecture(tmp_path)
    assert not has_exit_heads(config) and model_class(arch, config) is AlbertForSequenceClassification


def test_missing_or_misshapen_exit_heads_are_one_line(tmp_path):
    EarlyExitSequenceClassifier(_config()).save_pretrained(tmp_path)
    save_file({"exits.0.weight": torch.zeros(2, 32), "exits.0.bias": torch.zeros(2),
               "exits.1.weight": torch.zeros(3, 32), "exits.1.bias": torch.zeros(2)}, str(tmp_path / EXIT_HEADS_NAME))
    with pytest.raises(AlbertlmError, match=r"exit_heads.safetensors: exits.1.weight has shape \[3, 32\]"):
        EarlyExitSequenceClassifier.from_pretrained(tmp_path)
    save_file({"exits.0.weight": torch.zeros(2, 32), "exits.0.bias": torch.zeros(2)}, str(tmp_path / EXIT_HEADS_NAME))
    with pytest.raises(AlbertlmError, match="missing exits.1.bias"):
        EarlyExitSequenceClassifier.from_pretrained(tmp_path)
    (tmp_path / EXIT_HEADS_NAME).unlink()
    with pytest.raises(AlbertlmError, match="announces exit heads .* exit_heads.safetensors is missing"):
        load_model_dir(tmp_path)


def test_non_finite_or_integer_exit_heads_are_refused_naming_the_tensor(tmp_path):
    # A NaN head once made `predict --patience 1` print "0 nan" with exit status 0.
    EarlyExitSequenceClassifier(_config()).save_pretrained(tmp_path)
    heads = load_file(str(tmp_path / EXIT_HEADS_NAME))
    save_file({**heads, "exits.1.weight": torch.full((2, 32), float("nan"))}, str(tmp_path / EXIT_HEADS_NAME))
    with pytest.raises(AlbertlmError, match=r"exit_heads.safetensors: tensor exits.1.weight holds 64 NaN or "
                                            r"infinite values \(of 64\)"):
        EarlyExitSequenceClassifier.from_pretrained(tmp_path)
    save_file({**heads, "exits.0.bias": torch.zeros(2, dtype=torch.int32)}, str(tmp_path / EXIT_HEADS_NAME))
    with pytest.raises(AlbertlmError, match="exit_heads.safetensors: exits.0.bias has dtype int32; a weight must "
                                            "be floating point"):
        EarlyExitSequenceClassifier.from_pretrained(tmp_path)


@pytest.mark.parametrize("cls", [EarlyExitSequenceClassifier, EarlyExitTokenClassifier])
def test_the_directory_loads_in_transformers_with_the_final_logits(cls, tmp_path):
    tf = pytest.importorskip("transformers")
    model = _random_exit_model(cls, seed=5, num_labels=3)
    model.save_pretrained(tmp_path)
    hf_cls = getattr(tf, cls.__mro__[2].__name__)  # the plain head of the same name
    hf, info = hf_cls.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    ids, mask = _batch()
    with torch.no_grad():
        theirs = hf.eval()(input_ids=ids, attention_mask=mask).logits
        ours = model(ids, mask).logits
    real = mask.bool() if model.per_position else slice(None)
    assert (theirs[real] - ours[real]).abs().max().item() < 1e-5


# ---------------------------------------------------------------------------- the command line
@pytest.fixture(scope="module")
def sst_dirs(tmp_path_factory):
    """A random 4-layer tiny ALBERT with a vocabulary trained here, and an SST-2-shaped task whose label
    is a sentiment word in the sentence."""
    import random

    from albertlm import AlbertForPreTraining
    from albertlm.tokenizer import Tokenizer, train_tokenizer

    root = tmp_path_factory.mktemp("early-exit")
    r = random.Random(0)
    pos, neg = "good great fun lovely".split(), "bad awful boring dull".split()
    fill = "the movie was a film plot and it very really quite so".split()
    data = root / "sst"
    data.mkdir()
    for split, n in (("train", 200), ("dev", 40)):
        rows = ["sentence\tlabel"]
        for _ in range(n):
            y = r.randint(0, 1)
            rows.append(" ".join([*r.choices(fill, k=r.randint(1, 6)), r.choice(pos if y else neg), "."]) + f"\t{y}")
        (data / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    model = root / "pretrained"
    corpus = [" ".join(r.choices(pos + neg + fill, k=10)) for _ in range(300)]
    train_tokenizer(corpus, model, vocab_size=60, log=lambda msg: None)
    torch.manual_seed(0)
    config = _config(vocab_size=Tokenizer.load(model).vocab_size, num_hidden_layers=4)
    AlbertForPreTraining(config).save_pretrained(model)
    return model, data, root


@pytest.fixture(scope="module")
def ee_dir(sst_dirs, one_thread):
    """`albertlm finetune --early-exit` on the synthetic task: the directory both CLI tests read."""
    from albertlm.cli import main

    model, data, root = sst_dirs
    out = root / "ft"
    assert main(["finetune", "--task", "sst-2", "--model", str(model), "--data", str(data), "--out", str(out),
                 "--early-exit", "--steps", "40", "--batch-size", "16", "--lr", "2e-3", "--max-seq-length", "16",
                 "--eval-every", "40", "--no-progress"]) == 0
    assert (out / EXIT_HEADS_NAME).is_file()
    return out


def test_cli_finetune_early_exit_then_evaluate_and_predict_with_patience(sst_dirs, ee_dir, capsys):
    from albertlm.cli import main

    model, data, root = sst_dirs
    out = ee_dir
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        capsys.readouterr()
        assert main(["evaluate", "--model", str(out), "--data", str(data), "--patience", "2", "--json"]) == 0
        result = json.loads(capsys.readouterr().out)
        e = result["early_exit"]
        assert e["patience"] == 2 and e["layers"] == 4 and sum(e["exits_per_layer"]) == 40
        assert 3.0 <= e["average_layers"] <= 4.0  # patience 2 runs at least 3 of the 4 layers
        assert 0.0 <= result["metrics"]["accuracy"] <= 1.0
        # patience 3 of 4 layers can only exit at the last: the full-depth metrics
        assert main(["evaluate", "--model", str(out), "--data", str(data), "--patience", "3", "--json"]) == 0
        deep = json.loads(capsys.readouterr().out)
        assert main(["evaluate", "--model", str(out), "--data", str(data), "--json"]) == 0
        full = json.loads(capsys.readouterr().out)
        assert deep["early_exit"]["average_layers"] == 4.0 and deep["metrics"] == full["metrics"]
        assert "early_exit" not in full
        assert main(["evaluate", "--model", str(out), "--data", str(data), "--patience", "1"]) == 0
        assert "layers run on average" in capsys.readouterr().out
        lines = root / "lines.txt"
        lines.write_text("a good film .\n\nit was awful\n")
        assert main(["predict", "--model", str(out), str(lines), "--patience", "1"]) == 0
        captured = capsys.readouterr()
        assert len(captured.out.splitlines()) == 3 and captured.out.splitlines()[1] == ""
        assert "layers run on average over 2 inputs" in captured.err
    finally:
        torch.set_num_threads(threads)


def test_cli_patience_refusals_are_one_line(sst_dirs, ee_dir, tmp_path, capsys):
    from albertlm.cli import main

    model, data, root = sst_dirs
    out = ee_dir
    plain = tmp_path / "plain"
    plain.mkdir()
    for f in out.iterdir():
        if f.is_file() and f.name != EXIT_HEADS_NAME:
            (plain / f.name).write_bytes(f.read_bytes())
    config = json.loads((plain / "config.json").read_text())
    del config[CONFIG_KEY]
    (plain / "config.json").write_text(json.dumps(config))
    for argv, message in (
            (["evaluate", "--model", str(plain), "--data", str(data), "--patience", "2"], "has no exit heads"),
            (["predict", "--model", str(plain), "--patience", "2", str(data / "dev.tsv")], "has no exit heads"),
            (["evaluate", "--model", str(out), "--data", str(data), "--patience", "0"], "must be a positive integer"),
            (["finetune", "--task", "squad-v1.1", "--model", str(model), "--data", str(data), "--early-exit",
              "--out", str(tmp_path / "qa")], "early exit is implemented for")):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err
    assert main(["evaluate", "--model", str(plain), "--data", str(data), "--json"]) == 0  # plain still works


@pytest.mark.slow
def test_the_benchmark_script_runs_a_classification_and_a_regression_task(tmp_path):
    """benchmarks.early_exit end to end (its plumbing: two training steps mean nothing)."""
    import random

    from benchmarks import early_exit as bench
    from test_finetune import write_sst, write_stsb

    data = tmp_path / "data"
    for folder, writer in (("SST-2", write_sst), ("STS-B", write_stsb)):
        (data / folder).mkdir(parents=True)
        writer(data / folder, random.Random(0))
    results = tmp_path / "results.json"
    assert bench.main(["--tasks", "sst-2,sts-b", "--data", str(data), "--out", str(tmp_path / "out"), "--results",
                       str(results), "--steps", "2", "--dev-examples", "12", "--latency-examples", "3",
                       "--threads", "1"]) == 0
    envelope = json.loads(results.read_text())
    assert [t["target"] for t in envelope["targets"]] == [
        f"early exit on {task}: fewer layers on average, within 0.5 point of full depth" for task in ("sst-2", "sts-b")]
    sst, sts = envelope["results"]["tasks"]["sst-2"], envelope["results"]["tasks"]["sts-b"]
    assert sst["main_metric"] == "accuracy" and sts["main_metric"] == "pearson"
    assert sts["regression_threshold"] == 0.1 and sts["majority_class_accuracy"] is None
    for task in (sst, sts):
        assert set(task["settings"]) == {"full", *(f"patience_{p}" for p in range(1, 7))}
        assert 1 <= task["settings"]["patience_1"]["average_layers"] <= 12
    table = bench.markdown(envelope)
    assert "| setting | Pearson | Spearman | avg layers" in table and "| setting | accuracy | avg layers" in table


def test_cli_predict_with_nan_exit_heads_is_a_one_line_refusal(ee_dir, tmp_path, capsys):
    import shutil

    from albertlm.cli import main

    broken = Path(shutil.copytree(ee_dir, tmp_path / "nan"))
    heads = load_file(str(broken / EXIT_HEADS_NAME))
    save_file({k: torch.full_like(v, float("nan")) for k, v in heads.items()}, str(broken / EXIT_HEADS_NAME))
    lines = tmp_path / "lines.txt"
    lines.write_text("a good film .\n")
    capsys.readouterr()
    assert main(["predict", "--model", str(broken), str(lines), "--patience", "1"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and f"{EXIT_HEADS_NAME}: tensor exits.0.bias holds" in captured.err
