"""inference/: a directory loaded once (load_model_dir), predicted in batches (Predictor), the batches formed by
length and the outputs put back in input order, and the onnxruntime backend.

The models are tiny and trained for two steps: these tests are about shapes, order and parity, not accuracy."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest

from albertlm.cli import main
from albertlm.errors import AlbertlmError
from albertlm.inference.load import load_model_dir
from albertlm.inference.predict import Predictor, predict_lines
from albertlm.train.finetune import FinetuneRecipe, finetune
from test_distill import RECIPE, _pretrained, write_sst, write_stsb
from test_finetune import write_conll, write_race, write_squad
from test_task_checks import _write_multilabel

TWO_STEPS = FinetuneRecipe(steps=2, eval_every=2, **RECIPE)
RESULT_KEYS = {"sst-2": {"label", "probability"}, "sts-b": {"score"}, "multilabel": {"labels"},
               "conll2003": {"words", "tags"}, "squad-v1.1": {"answer"}, "race": {"choice", "option"}}
INPUTS = {
    "sst-2": ["the movie was good .", ("the film was", "bad and dull ."), "a really superb plot , the actor was fun ."],
    "sts-b": [("the movie was good .", "a fun film ."), ("bad .", "the story was dull .")],
    "multilabel": ["good film .", "the plot was awful ."],
    "conll2003": ["john went to paris .", "mary flew to rome and anna drove to berlin ."],
    "squad-v1.1": [("what color is it ?", "the cat is red ."), '{"question": "who went ?", "context": "john went ."}'],
    "race": [json.dumps({"context": "a film", "question": "which one is a color ?",
                         "options": ["cat", "blue", "dog", "fish"]})],
}


@pytest.fixture(scope="module")
def dirs(tmp_path_factory, one_thread) -> dict[str, Path]:
    """One directory fine-tuned for two steps per result shape."""
    root = tmp_path_factory.mktemp("inference")
    pre = _pretrained(root / "pre", 100)
    data = {"sst-2": write_sst(root / "sst", n_train=40, n_dev=10), "sts-b": write_stsb(root / "stsb"),
            "multilabel": _write_multilabel(root / "ml")}
    for task, writer in (("conll2003", write_conll), ("squad-v1.1", write_squad), ("race", write_race)):
        (root / task).mkdir()
        writer(root / task, random.Random(0))
        data[task] = root / task
    out = {}
    for task, d in data.items():
        finetune(task, pre, d, root / f"ft-{task}", TWO_STEPS, progress=False)
        out[task] = root / f"ft-{task}"
    return out


@pytest.mark.parametrize("task", list(INPUTS))
def test_predictor_results_are_what_predict_prints(dirs, task, tmp_path, capsys):
    """Predictor.predict gives one dict per input, each the line `albertlm predict` prints for that input."""
    predictor = Predictor(dirs[task], batch_size=2)
    results = predictor.predict(INPUTS[task])
    assert len(results) == len(INPUTS[task]) and all(set(r) == RESULT_KEYS[task] for r in results)
    lines = [x if isinstance(x, str) else "\t".join(x) for x in INPUTS[task]]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    assert main(["predict", "--model", str(dirs[task]), str(tmp_path / "in.txt"), "--device", "cpu"]) == 0
    assert capsys.readouterr().out.splitlines() == [predictor.line(r) for r in results]
    assert predict_lines(dirs[task], lines, batch_size=1) == [predictor.line(r) for r in results]


def test_each_result_is_the_line_in_its_own_format(dirs):
    first = {task: Predictor(dirs[task]).predict(INPUTS[task][:1])[0] for task in INPUTS}
    label = first["sst-2"]
    assert label["label"] in ("0", "1") and 0.5 <= label["probability"] <= 1.0
    assert Predictor(dirs["sst-2"]).line(label) == f"{label['label']}\t{label['probability']:.4f}"
    assert re.fullmatch(r"-?\d+\.\d{4}", Predictor(dirs["sts-b"]).line(first["sts-b"]))
    assert isinstance(first["sts-b"]["score"], float)
    assert set(first["multilabel"]["labels"]) <= {"a", "b", "c"}
    assert first["conll2003"]["words"] == "john went to paris .".split()
    assert Predictor(dirs["conll2003"]).line(first["conll2003"]) == " ".join(
        f"{w}/{t}" for w, t in zip(first["conll2003"]["words"], first["conll2003"]["tags"]))
    assert first["race"]["choice"] in "ABCD" and first["race"]["option"] in ("cat", "blue", "dog", "fish")
    assert isinstance(first["squad-v1.1"]["answer"], str)


def test_predictor_refuses_inputs_it_cannot_read(dirs):
    predictor = Predictor(dirs["sst-2"])
    for bad, match in ((["good .", "  "], "input 2 is blank"), ([("a\tb", "c")], "holds a tab"),
                       ([("a", "b", "c")], "two strings"), ([3], "a string or a pair")):
        with pytest.raises(AlbertlmError, match=match):
            predictor.predict(bad)
    assert predictor.predict([]) == []
    with pytest.raises(AlbertlmError, match="--batch-size"):
        Predictor(dirs["sst-2"], batch_size=0)


def test_load_model_dir_says_what_the_directory_holds(dirs):
    loaded = load_model_dir(dirs["sst-2"])
    assert (loaded.arch, loaded.labels, loaded.problem_type, loaded.backend) == (
        "AlbertForSequenceClassification", ["0", "1"], "single_label_classification", "torch")
    assert loaded.settings().max_seq_length == RECIPE["max_seq_length"] and not loaded.exit_heads
    assert loaded.runner is loaded.model and loaded.patience is None
    assert load_model_dir(dirs["sts-b"]).labels is None and load_model_dir(dirs["sts-b"]).problem_type == "regression"
    assert load_model_dir(dirs["conll2003"]).family.name == "ner"
    with pytest.raises(AlbertlmError, match="exclusive"):
        load_model_dir(dirs["sst-2"], int8="fbgemm", prepack=True)
    with pytest.raises(AlbertlmError, match="has no exit heads"):
        load_model_dir(dirs["sst-2"], patience=1)
    with pytest.raises(AlbertlmError, match="no masked-LM head"):
        load_model_dir(dirs["sst-2"], pretrained=True)
    with pytest.raises(AlbertlmError, match="not a fine-tuned model"):
        load_model_dir(dirs["sst-2"].parent / "pre")


def _old_run_features(model, spec, features, batch_size, device):
    """run_features as it was before the batches came from data.bucketing: sort, slice, scatter back."""
    import torch

    from albertlm.inference.run import to_device
    from albertlm.tasks.common import pad_batch

    order = sorted(range(len(features)), key=lambda i: len(features[i]))
    out = {name: [None] * len(features) for name in spec.family.outputs}
    with torch.no_grad():
        for k in range(0, len(order), batch_size):
            idx = order[k:k + batch_size]
            batch = {n: v for n, v in pad_batch([features[i] for i in idx]).items()
                     if n in ("input_ids", "attention_mask", "token_type_ids")}
            result = model(**to_device(batch, device))
            for name in spec.family.outputs:
                for row, i in zip(getattr(result, name).float().cpu().numpy(), idx):
                    out[name][i] = row[:len(features[i])] if spec.family.per_position else row
    return out


@pytest.mark.parametrize("task", ["sst-2", "conll2003", "squad-v1.1"])
def test_length_batches_give_the_same_outputs_in_input_order(dirs, task):
    """run_features batches by length (data.bucketing) and puts every output back at its feature: the
    outputs equal the former sort-and-slice loop's exactly, and each feature run alone (float rounding)."""
    from albertlm.inference.run import run_features
    from albertlm.tasks.registry import TaskSpec

    loaded = load_model_dir(dirs[task])
    family = loaded.family
    spec = TaskSpec.for_prediction(family, loaded.problem_type)
    lines = [x if isinstance(x, str) else "\t".join(x) for x in INPUTS[task]] * 3
    lines = [line.replace(" .", " " + " ".join(["the"] * (i % 4)) + " .", 1) for i, line in enumerate(lines)]
    examples = [family.parse_line(i, line, loaded.tokenizer) for i, line in enumerate(lines)]
    features = family.featurize(spec, examples, loaded.tokenizer, loaded.labels, loaded.settings(), False)
    assert len({len(f) for f in features}) > 1  # lengths differ, so sorting reorders them
    new = run_features(loaded.model, spec, features, 4, loaded.device)
    old = _old_run_features(loaded.model, spec, features, 4, loaded.device)
    alone = run_features(loaded.model, spec, features, 1, loaded.device)
    for name in family.outputs:
        assert all(np.array_equal(a, b) for a, b in zip(new[name], old[name], strict=True))
        assert all(np.allclose(a, b, atol=1e-5) for a, b in zip(new[name], alone[name], strict=True))


def test_an_onnx_file_runs_behind_the_same_predictor(dirs, tmp_path, capsys):
    """load_model_dir(onnx=FILE): the directory gives the config, labels, settings and tokenizer, onnxruntime
    runs the exported file; the predictions are the torch model's."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    for task in ("sst-2", "conll2003"):
        path = tmp_path / f"{task}.onnx"
        assert main(["export", str(dirs[task]), str(path), "--exporter", "legacy"]) == 0
        capsys.readouterr()
        onnx = Predictor(dirs[task], onnx=path)
        assert onnx.loaded.backend == "onnxruntime" and onnx.loaded.arch == load_model_dir(dirs[task]).arch
        torch_results = Predictor(dirs[task]).predict(INPUTS[task])
        onnx_results = onnx.predict(INPUTS[task])
        for a, b in zip(torch_results, onnx_results, strict=True):
            assert a.keys() == b.keys() and a.get("label") == b.get("label") and a.get("tags") == b.get("tags")
            assert a.get("probability", 0.0) == pytest.approx(b.get("probability", 0.0), abs=1e-4)
    with pytest.raises(AlbertlmError, match="its outputs are logits; .* holds an AlbertForQuestionAnswering"):
        load_model_dir(dirs["squad-v1.1"], onnx=tmp_path / "sst-2.onnx")
    with pytest.raises(AlbertlmError, match="exclusive"):
        load_model_dir(dirs["sst-2"], onnx=tmp_path / "sst-2.onnx", int8="fbgemm")
    with pytest.raises(AlbertlmError, match="no such ONNX file"):
        load_model_dir(dirs["sst-2"], onnx=tmp_path / "missing.onnx")
