"""What a fine-tuned directory must be before it scores a task or teaches a student: a head that fits
the task (problem type, number of labels, label set), trained head weights, a student that tokenizes
as its teacher, sane distillation settings, and a teacher-logit cache that is verified, not trusted.

The models are tiny and trained for two steps: these tests are about refusals, not accuracy."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from albertlm.cli import main
from albertlm.errors import AlbertlmError
from albertlm.train.distill import distill
from albertlm.train.finetune import FinetuneRecipe, finetune
from albertlm.train.inference import evaluate_dir, predict_lines
from test_distill import RECIPE, _pretrained, write_sst, write_stsb

TWO_STEPS = FinetuneRecipe(steps=2, eval_every=2, **RECIPE)


def _write_multilabel(d: Path) -> Path:
    r = random.Random(0)
    d.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", 40), ("dev", 10)):
        rows = [{"text": "good film .", "label": r.sample(["a", "b", "c"], r.randint(0, 2))} for _ in range(n)]
        (d / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return d


@pytest.fixture(scope="module")
def fx(tmp_path_factory, one_thread) -> dict[str, Path]:
    """A tiny pretrained directory, four task data sets, and a model fine-tuned (two steps) on each."""
    root = tmp_path_factory.mktemp("task-checks")
    fx = {"root": root, "pre": _pretrained(root / "pre", 100), "sst": write_sst(root / "sst", n_train=40, n_dev=10),
          "stsb": write_stsb(root / "stsb"), "ml": _write_multilabel(root / "ml")}
    three = write_sst(root / "three", seed=1, n_train=40, n_dev=10)
    for split in ("train", "dev"):  # generic columns, and a third class: the generic task learns three labels
        rows = (three / f"{split}.tsv").read_text().replace("sentence\t", "text\t", 1)
        (three / f"{split}.tsv").write_text(rows + "a neutral film .\t2\n")
    fx["three"] = three
    for name, task, data in (("ft", "sst-2", fx["sst"]), ("ft-stsb", "sts-b", fx["stsb"]),
                             ("ft-ml", "multilabel", fx["ml"]),
                             ("ft-3", "classification", three)):
        finetune(task, fx["pre"], data, root / name, TWO_STEPS, progress=False)
        fx[name] = root / name
    return fx


def _copy(src: Path, dst: Path, **config) -> Path:
    shutil.copytree(src, dst)
    path = dst / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
    return dst


# ---------------------------------------------------------------------------- a head that fits the task
@pytest.mark.parametrize("model, data, task, head, wanted", [
    ("ft", "stsb", "sts-b", "single_label_classification with 2 labels (0, 1)", "regression with 1 output"),  # EV06
    ("ft-stsb", "sst", "sst-2", "regression with 1 output", "single_label_classification with 2 labels"),  # EV12
    ("ft-ml", "sst", "sst-2", "multi_label_classification with 3 labels (a, b, c)",
     "single_label_classification with 2 labels (0, 1)"),  # EV13
    ("ft", "ml", "multilabel", "single_label_classification with 2 labels", "multi_label_classification"),  # EV14
    ("ft-3", "sst", "sst-2", "single_label_classification with 3 labels (0, 1, 2)",
     "single_label_classification with 2 labels (0, 1)"),
])
def test_a_task_the_head_does_not_fit_is_refused(fx, model, data, task, head, wanted):
    with pytest.raises(AlbertlmError) as info:
        evaluate_dir(fx[model], fx[data], task)
    message = str(info.value)
    assert message.startswith(f"{fx[model]}: its head is {head}") and f"task {task} is {wanted}" in message
    assert "\n" not in message


def test_evaluate_refuses_another_problem_type_in_one_line(fx, capsys):
    assert main(["evaluate", "--model", str(fx["ft"]), "--data", str(fx["stsb"]), "--task", "sts-b",
                 "--device", "cpu"]) == 2
    captured = capsys.readouterr()
    assert not captured.out and len(captured.err.strip().splitlines()) == 1
    assert "its head is single_label_classification with 2 labels (0, 1); task sts-b is regression" in captured.err


def test_label_names_other_than_the_tasks_are_refused(fx, tmp_path):
    named = _copy(fx["ft"], tmp_path / "named", id2label={"0": "neg", "1": "pos"}, label2id={"neg": 0, "pos": 1})
    with pytest.raises(AlbertlmError, match=r"2 labels \(neg, pos\); task sst-2 is .* 2 labels \(0, 1\)"):
        evaluate_dir(named, fx["sst"])


def test_labels_a_generic_split_has_and_the_head_lacks_are_refused(fx):
    with pytest.raises(AlbertlmError, match=r"2 labels \(0, 1\); the dev split of task classification has labels "
                                            r"it lacks: 2$"):  # the generic task's data decides its labels
        evaluate_dir(fx["ft"], fx["three"], "classification")


def test_heads_that_fit_still_score(fx, tmp_path):
    assert "accuracy" in evaluate_dir(fx["ft"], fx["sst"])["metrics"]
    assert "pearson" in evaluate_dir(fx["ft-stsb"], fx["stsb"])["metrics"]
    assert "micro_f1" in evaluate_dir(fx["ft-ml"], fx["ml"])["metrics"]
    # fine-tuned elsewhere without label names (LABEL_0, LABEL_1): the task's own order
    unnamed = _copy(fx["ft"], tmp_path / "unnamed", id2label={"0": "LABEL_0", "1": "LABEL_1"},
                    label2id={"LABEL_0": 0, "LABEL_1": 1})
    assert evaluate_dir(unnamed, fx["sst"]) == evaluate_dir(fx["ft"], fx["sst"])


# ---------------------------------------------------------------------------- trained head weights
def test_a_pretraining_directory_that_claims_a_classifier_is_refused(fx, tmp_path, capsys):
    """DS19: config.json's architectures says AlbertForSequenceClassification; the weights have no classifier."""
    claims = _copy(fx["pre"], tmp_path / "claims", architectures=["AlbertForSequenceClassification"])
    expected = rf"^{claims / 'model.safetensors'}: no classifier\.(weight|bias) \(and 1 more\), yet config\.json"
    with pytest.raises(AlbertlmError, match=expected):
        evaluate_dir(claims, fx["sst"], "sst-2")
    with pytest.raises(AlbertlmError, match=expected):
        predict_lines(claims, ["a good film ."])
    with pytest.raises(AlbertlmError, match=expected):
        distill("sst-2", claims, "test", fx["sst"], tmp_path / "out", TWO_STEPS, progress=False)
    assert not (tmp_path / "out").exists()
    assert main(["distill", "--teacher", str(claims), "--student", "test", "--task", "sst-2", "--data",
                 str(fx["sst"]), "--steps", "2", "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no classifier." in err
    # fine-tuning from it starts a fresh head, as it should
    finetune("sst-2", claims, fx["sst"], tmp_path / "ft", FinetuneRecipe(steps=1, **RECIPE), progress=False)
    assert "accuracy" in evaluate_dir(tmp_path / "ft", fx["sst"])["metrics"]


def test_a_fine_tuned_directory_without_its_pooler_is_refused(fx, tmp_path):
    from safetensors.numpy import load_file, save_file

    clipped = _copy(fx["ft"], tmp_path / "clipped")
    tensors = load_file(str(clipped / "model.safetensors"))
    save_file({k: v for k, v in tensors.items() if "pooler" not in k}, str(clipped / "model.safetensors"),
              metadata={"format": "pt"})
    with pytest.raises(AlbertlmError, match=r"model\.safetensors: no albert\.pooler\.(weight|bias) \(and 1 more\)"):
        predict_lines(clipped, ["a good film ."])
