"""What a fine-tuned directory must be before it scores a task or teaches a student: a head that fits
the task (problem type, number of labels, label set), trained head weights, a student that tokenizes
as its teacher, sane distillation settings, and a teacher-logit cache that is verified, not trusted.

The models are tiny and trained for two steps: these tests are about refusals, not accuracy."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest

from albertlm.cli import main
from albertlm.errors import AlbertlmError
from albertlm.inference.evaluate import evaluate_dir
from albertlm.inference.predict import predict_lines
from albertlm.train import distill as distill_module
from albertlm.train.distill import TEACHER_CACHE, DistillSettings, distill
from albertlm.train.finetune import FinetuneRecipe, finetune
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



def test_a_tagger_whose_tags_the_split_lacks_entirely_is_refused(fx, tmp_path):
    """A token classifier fine-tuned elsewhere without tag names (LABEL_0, ...) once scored F1 0 and exit 0."""
    from test_finetune import write_conll

    data = tmp_path / "conll"
    data.mkdir()
    write_conll(data, random.Random(0))
    tagger = tmp_path / "ner"
    finetune("conll2003", fx["pre"], data, tagger, TWO_STEPS, progress=False)
    assert "f1" in evaluate_dir(tagger, data)["metrics"]
    n = len(json.loads((tagger / "config.json").read_text())["id2label"])
    names = {str(i): f"LABEL_{i}" for i in range(n)}
    unnamed = _copy(tagger, tmp_path / "unnamed", id2label=names, label2id={v: int(k) for k, v in names.items()})
    with pytest.raises(AlbertlmError, match=rf"^{unnamed}: its head's tags are LABEL_0, LABEL_1, .*; the dev split "
                                            r"of task conll2003 has none of them \(B-"):
        evaluate_dir(unnamed, data)



@pytest.mark.parametrize("changes, message", [
    ({"albertlm_features": {"max_seq_length": "x"}}, "albertlm_features.max_seq_length must be an integer, got 'x'"),
    ({"albertlm_features": {"null_threshold": float("nan")}},
     "albertlm_features.null_threshold must be a finite number, got nan"),
    ({"albertlm_features": {"doc_stride": 0}}, "albertlm_features.doc_stride must be at least 1, got 0"),
    ({"albertlm_features": {"max_seq_length": 2}}, "albertlm_features.max_seq_length must be at least 8, got 2"),
    ({"albertlm_features": 5}, "albertlm_features must be an object of input settings, got 5"),
    ({"finetuning_task": 5}, "finetuning_task must be a task name, got 5"),
])
def test_albertlm_entries_of_config_json_are_checked_naming_the_file(fx, tmp_path, changes, message):
    # albertlm writes these itself; a hand-edited one was a TypeError or AttributeError traceback, or a NaN used
    edited = _copy(fx["ft"], tmp_path / "edited", **changes)
    expected = rf"^{edited / 'config.json'}: {message}$"
    with pytest.raises(AlbertlmError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        predict_lines(edited, ["a good film ."])
    with pytest.raises(AlbertlmError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        evaluate_dir(edited, fx["sst"], "sst-2")

def test_a_teacher_is_checked_against_the_task_as_evaluate_checks_a_model(fx, tmp_path):
    with pytest.raises(AlbertlmError, match=rf"^--teacher {fx['ft-stsb']}: its head is regression with 1 output; "
                                            "task sst-2 is single_label_classification"):
        distill("sst-2", fx["ft-stsb"], "test", fx["sst"], tmp_path / "out", TWO_STEPS, progress=False)
    with pytest.raises(AlbertlmError, match=r"its head is multi_label_classification with 3 labels"):
        distill("sst-2", fx["ft-ml"], "test", fx["sst"], tmp_path / "out", TWO_STEPS, progress=False)
    assert not (tmp_path / "out").exists()


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


# ---------------------------------------------------------------------------- distillation settings
@pytest.mark.parametrize("temperature", [1e200, 1e-200, 1000.0, 0.001])
def test_a_temperature_out_of_range_is_refused(temperature):
    with pytest.raises(AlbertlmError, match=r"^--temperature must lie in \[0\.01, 100\], got "):
        DistillSettings(temperature=temperature)


def test_a_temperature_out_of_range_is_one_line_before_any_work(fx, tmp_path, capsys):
    assert main(["distill", "--teacher", str(fx["ft"]), "--student", "test", "--task", "sst-2", "--data",
                 str(fx["sst"]), "--out", str(tmp_path / "d06"), "--temperature", "1e200", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--temperature must lie in [0.01, 100], got 1e+200" in err
    assert not (tmp_path / "d06").exists()
    for alpha in (1.5, -0.1):
        with pytest.raises(AlbertlmError, match=r"^--alpha must lie in \[0, 1\]"):
            DistillSettings(alpha=alpha)


# ---------------------------------------------------------------------------- a student that tokenizes as its teacher
def test_a_student_with_another_vocabulary_is_refused(fx, tmp_path):
    """DS22: another spiece.model, of the same size."""
    other = _pretrained(tmp_path / "other", 100, seed=1)
    with pytest.raises(AlbertlmError, match=rf"^--student {other} and --teacher {fx['ft']} tokenize differently "
                                            r"\(spiece\.model sha256 [0-9a-f]{16}, the teacher's [0-9a-f]{16}\)"):
        distill("sst-2", fx["ft"], str(other), fx["sst"], tmp_path / "out", TWO_STEPS, progress=False)
    assert not (tmp_path / "out").exists()


def test_a_student_with_another_tokenizer_setting_is_refused(fx, tmp_path):
    """DS23: do_lower_case false in the student's tokenizer_config.json."""
    student = shutil.copytree(fx["pre"], tmp_path / "cased")
    path = student / "tokenizer_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "do_lower_case": False}))
    with pytest.raises(AlbertlmError, match=r"tokenize differently \(tokenizer_config\.json do_lower_case is False, "
                                            r"the teacher's True\)"):
        distill("sst-2", fx["ft"], str(student), fx["sst"], tmp_path / "out", TWO_STEPS, progress=False)



# ---------------------------------------------------------------------------- outputs that are not numbers
@pytest.fixture(scope="module")
def overflowing(fx) -> Path:
    """A fine-tuned directory whose weights are finite but overflow float32 (embedding LayerNorm gain 1e30):
    every output is NaN."""
    from safetensors.numpy import load_file, save_file

    d = fx["root"] / "overflowing"
    shutil.copytree(fx["ft"], d, ignore=shutil.ignore_patterns(".albertlm*"))
    weights = load_file(str(d / "model.safetensors"))
    key = "albert.embeddings.LayerNorm.weight"
    save_file({**weights, key: np.full_like(weights[key], 1e30)}, str(d / "model.safetensors"),
              metadata={"format": "pt"})
    return d


def test_evaluate_and_predict_refuse_outputs_that_are_not_finite(fx, overflowing, capsys):
    # they once scored the NaN logits as class 0 (accuracy of the majority) and printed them, exit 0
    with pytest.raises(AlbertlmError, match=rf"^{overflowing}: its logits are NaN or infinite for 10 of 10 inputs"):
        evaluate_dir(overflowing, fx["sst"])
    with pytest.raises(AlbertlmError, match=rf"^{overflowing}: its logits are NaN or infinite for 1 of 1 inputs"):
        predict_lines(overflowing, ["a good film ."])
    assert main(["evaluate", "--model", str(overflowing), "--data", str(fx["sst"]), "--device", "cpu"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_a_teacher_whose_logits_are_not_finite_is_refused_and_nothing_is_cached(fx, overflowing, tmp_path):
    # the student once trained on NaN soft targets: every step skipped, the untrained student written, exit 0
    with pytest.raises(AlbertlmError, match=rf"^--teacher {overflowing}: its logits are NaN or infinite for 40 of 40"):
        distill("sst-2", overflowing, "test", fx["sst"], tmp_path / "out", TWO_STEPS, progress=False)
    assert not (tmp_path / "out" / TEACHER_CACHE).exists() and not (tmp_path / "out" / "model.safetensors").exists()

# ---------------------------------------------------------------------------- the teacher-logit cache
@pytest.fixture
def cached_run(fx, tmp_path):
    """A distillation run whose cache holds the teacher's logits; returns (rerun, cache path, its logits)."""
    from safetensors.numpy import load_file

    out = tmp_path / "dc"

    def rerun(**settings):
        return distill("sst-2", fx["ft"], "test", fx["sst"], out, FinetuneRecipe(steps=1, **RECIPE),
                       DistillSettings(**settings), progress=False)["distillation"]["teacher_logits_cached"]

    assert not rerun()
    return rerun, out / TEACHER_CACHE, load_file(str(out / TEACHER_CACHE))["logits"]


def _rewrite(path: Path, logits: np.ndarray, **metadata: str) -> None:
    """Replace the cached logits, keeping the file's metadata (its key, its stored sha256) but `metadata`."""
    from safetensors import safe_open
    from safetensors.numpy import save_file

    with safe_open(str(path), framework="numpy") as fh:
        meta = fh.metadata()
    save_file({"logits": logits}, str(path), metadata={**meta, **metadata})


def test_tampered_cached_logits_are_computed_again(cached_run):
    """DC2: finite logits of the right shape under the right key, but not the ones that were cached."""
    from safetensors.numpy import load_file

    rerun, cache, logits = cached_run
    forged = np.zeros_like(logits)
    forged[:, 0] = 50.0
    _rewrite(cache, forged)
    with pytest.warns(UserWarning, match="do not match the sha256 stored with them; computing the teacher's"):
        assert not rerun(alpha=1.0)
    np.testing.assert_array_equal(load_file(str(cache))["logits"], logits)
    assert rerun(alpha=1.0)  # the rewritten cache is trusted again


def test_a_flipped_byte_in_the_cache_is_computed_again(cached_run):
    """DC3: one mantissa byte of the last logit changed (still a finite number)."""
    from safetensors.numpy import load_file

    rerun, cache, logits = cached_run
    data = bytearray(cache.read_bytes())
    data[-3] ^= 0x55
    cache.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="do not match the sha256"):
        assert not rerun()
    np.testing.assert_array_equal(load_file(str(cache))["logits"], logits)


def test_non_finite_cached_logits_are_computed_again(cached_run):
    """Even with a sha256 that matches them."""
    rerun, cache, logits = cached_run
    broken = logits.copy()
    broken[0, 0] = np.nan
    _rewrite(cache, broken, sha256=distill_module._logits_sha256(broken))
    with pytest.warns(UserWarning, match="non-finite logits"):
        assert not rerun()


def test_a_directory_where_the_cache_goes_is_refused_and_kept(cached_run):
    """DC7: albertlm does not replace (or delete) a directory it did not write."""
    rerun, cache, _ = cached_run
    cache.unlink()
    cache.mkdir()
    (cache / "mine.txt").write_text("keep me")
    with pytest.raises(AlbertlmError, match=rf"^{cache}: is a directory, but it is where distillation caches"):
        rerun()
    assert (cache / "mine.txt").read_text() == "keep me"
