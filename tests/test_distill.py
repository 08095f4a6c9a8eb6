"""Distillation (train/distill.py, `albertlm distill`) on a tiny synthetic sentiment task: the loss
terms against hand computations, alpha = 0 against plain fine-tuning, the teacher-logit cache, a
student that learns the teacher, the refusals, and the command end to end; token classification
(NER) the same way on a tiny CoNLL-shaped task."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from albertlm import AlbertConfig, AlbertForPreTraining
from albertlm.cli import main
from albertlm.errors import AlbertlmError
from albertlm.inference.evaluate import evaluate_dir
from albertlm.inference.predict import predict_lines
from albertlm.tasks.registry import get_task
from albertlm.tokenizer import Tokenizer, train_tokenizer
from albertlm.train import distill as distill_module
from albertlm.train.distill import DistillSettings, distill, distill_objective, token_distill_objective
from albertlm.train.finetune import FinetuneRecipe, finetune
from albertlm.train.metrics import read_metrics

POS = "good great fun lovely superb".split()
NEG = "bad awful boring dull terrible".split()
FILL = "the movie was a film plot actor story and it very really quite so".split()
RECIPE = dict(lr=3e-3, batch_size=16, warmup_steps=3, log_every=1, max_seq_length=32, eval_batch_size=64)


def _sentence(r: random.Random, label: int) -> str:
    return " ".join([*r.choices(FILL, k=3), r.choice(POS if label else NEG), *r.choices(FILL, k=2)]) + " ."


def write_sst(d: Path, seed: int = 0, n_train: int = 240, n_dev: int = 60) -> Path:
    """SST-2-shaped files: a sentence is positive when its one sentiment word is."""
    r = random.Random(seed)
    d.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("dev", n_dev)):
        rows = ["sentence\tlabel"] + [f"{_sentence(r, y)}\t{y}" for y in (r.randint(0, 1) for _ in range(n))]
        (d / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    return d


def write_stsb(d: Path, seed: int = 0) -> Path:
    """STS-B-shaped files (test_finetune's): the score counts the positive words of the first sentence."""
    from test_finetune import write_stsb as write_stsb_rows

    d.mkdir(parents=True, exist_ok=True)
    write_stsb_rows(d, random.Random(seed))
    return d


def _pretrained(path: Path, vocab_size: int, seed: int = 0) -> Path:
    r = random.Random(seed)
    corpus = [" ".join(r.choices(POS + NEG + FILL + [".", "?"], k=12)) for _ in range(500)]
    train_tokenizer(corpus, path, vocab_size=vocab_size, log=lambda msg: None)
    config = AlbertConfig(vocab_size=Tokenizer.load(path).vocab_size, embedding_size=16, hidden_size=32,
                          num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                          max_position_embeddings=128)
    torch.manual_seed(seed)
    AlbertForPreTraining(config).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory, one_thread) -> dict[str, Path]:
    """A tiny random 'pretrained' model, the task data, and a teacher fine-tuned on it (~0.9+ dev accuracy)."""
    root = tmp_path_factory.mktemp("distill")
    pre = _pretrained(root / "pretrained", 100)
    data = write_sst(root / "sst")
    results = finetune("sst-2", pre, data, root / "teacher", FinetuneRecipe(steps=100, eval_every=50, **RECIPE),
                       progress=False)
    assert results["best"]["accuracy"] > 0.9, results["best"]
    return {"root": root, "pretrained": pre, "data": data, "teacher": root / "teacher"}


class _Fixed(torch.nn.Module):
    """A 'model' whose logits are a fixed parameter (to drive the objective by hand)."""

    def __init__(self, logits):
        super().__init__()
        self.logits = torch.nn.Parameter(torch.tensor(logits, dtype=torch.float32))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        return type("Out", (), {"logits": self.logits})()


# ---------------------------------------------------------------------------- the objective
def test_kl_term_equals_a_hand_computation():
    student, teacher, T = [[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]], [[2.0, 0.0, 1.0], [0.5, 0.5, 0.5]], 2.0

    def softmax(z):
        e = [math.exp(x / T) for x in z]
        return [x / sum(e) for x in e]

    by_hand = [T * T * sum(p * math.log(p / q) for p, q in zip(softmax(t), softmax(s)))
               for s, t in zip(student, teacher)]
    loss_fn, count = distill_objective("single_label_classification", T, alpha=1.0)
    batch = {"input_ids": torch.zeros(2, 4, dtype=torch.long), "labels": torch.tensor([0, 2]),
             "teacher_logits": torch.tensor(teacher), "hard_weight": torch.ones(2)}
    loss, metrics = loss_fn(_Fixed(student), batch, count(batch))
    assert metrics["soft_sum"] == pytest.approx(sum(by_hand), rel=1e-5)
    assert float(loss.detach()) == pytest.approx(sum(by_hand) / 2, rel=1e-5)  # mean over the examples, T^2 included
    # at T = 1 the factor is 1; the KL is zero when the student equals the teacher
    one, _ = distill_objective("single_label_classification", 1.0, alpha=1.0)
    assert float(one(_Fixed(teacher), batch, count(batch))[0].detach()) == pytest.approx(0.0, abs=1e-6)


def test_hard_term_and_mixing_by_hand():
    student, teacher = [[1.0, 2.0], [0.0, -1.0], [0.3, 0.2]], [[2.0, 0.0], [0.5, 0.5], [1.0, 1.0]]
    labels, weights = [1, 0, 1], [1.0, 1.0, 0.0]  # the third row is unlabelled text
    T, alpha = 3.0, 0.25
    ce = [math.log(sum(math.exp(x) for x in s)) - s[y] for s, y in zip(student, labels)]
    soft = float(distill_module._softmax_kl(torch.tensor(student), torch.tensor(teacher), T).sum())
    loss_fn, count = distill_objective("single_label_classification", T, alpha)
    batch = {"input_ids": torch.zeros(3, 4, dtype=torch.long), "labels": torch.tensor(labels),
             "teacher_logits": torch.tensor(teacher), "hard_weight": torch.tensor(weights)}
    loss, _ = loss_fn(_Fixed(student), batch, count(batch))
    assert float(loss.detach()) == pytest.approx(alpha * soft / 3 + (1 - alpha) * (ce[0] + ce[1]) / 2, rel=1e-5)
    # regression: the soft target is the teacher's output, no temperature
    reg, reg_count = distill_objective("regression", 5.0, alpha=0.5)
    rb = {"input_ids": torch.zeros(2, 4, dtype=torch.long), "labels": torch.tensor([1.0, 2.0]),
          "teacher_logits": torch.tensor([[0.5], [3.0]]), "hard_weight": torch.ones(2)}
    value = float(reg(_Fixed([[1.5], [2.5]]), rb, reg_count(rb))[0].detach())
    assert value == pytest.approx(0.5 * (1.0 + 0.25) / 2 + 0.5 * (0.25 + 0.25) / 2)
    # multi-label: Bernoulli KL per label at temperature T, averaged over labels
    s, t = 0.4, -1.0
    p, q = 1 / (1 + math.exp(-t / 2)), 1 / (1 + math.exp(-s / 2))
    kl = 4 * (p * math.log(p / q) + (1 - p) * math.log((1 - p) / (1 - q)))
    got = distill_module._bernoulli_kl(torch.tensor([[s, s]]), torch.tensor([[t, t]]), 2.0)
    assert float(got[0]) == pytest.approx(kl, rel=1e-5)


def assert_alpha_zero_is_finetuning(task: str, pretrained: Path, data: Path, teacher: Path, out: Path, steps: int):
    """distill at alpha = 0 from `pretrained` gives fine-tuning's losses step for step, and its best dev score."""
    recipe = FinetuneRecipe(steps=steps, eval_every=steps // 2, micro_batch_size=8, **RECIPE)
    plain = finetune(task, pretrained, data, out / "plain", recipe, progress=False)
    dist = distill(task, teacher, str(pretrained), data, out / "dist", recipe, DistillSettings(alpha=0.0),
                   progress=False)
    a = [r["loss"] for r in read_metrics(out / "plain" / "metrics.jsonl") if r["split"] == "train"]
    b = [r["loss"] for r in read_metrics(out / "dist" / "metrics.jsonl") if r["split"] == "train"]
    assert len(a) == len(b) == steps
    assert b == pytest.approx(a, rel=1e-4)
    assert dist["best"] == pytest.approx(plain["best"])


def test_alpha_zero_equals_plain_finetuning(world, tmp_path):
    assert_alpha_zero_is_finetuning("sst-2", world["pretrained"], world["data"], world["teacher"], tmp_path, 12)


# ---------------------------------------------------------------------------- the teacher's cache
def test_teacher_logits_are_cached_and_invalidated(world, tmp_path, monkeypatch):
    calls = []
    real = distill_module.run_features

    def counting(model, spec, features, batch_size, device):
        calls.append(len(features))
        return real(model, spec, features, batch_size, device)

    monkeypatch.setattr(distill_module, "run_features", counting)
    data = write_sst(tmp_path / "data", seed=3, n_train=40, n_dev=10)
    recipe = FinetuneRecipe(steps=2, **RECIPE)
    out = tmp_path / "out"
    first = distill("sst-2", world["teacher"], "test", data, out, recipe, progress=False)
    assert calls == [40] and not first["distillation"]["teacher_logits_cached"]
    again = distill("sst-2", world["teacher"], "test", data, out, recipe, progress=False)  # a rerun reuses them
    assert calls == [40] and again["distillation"]["teacher_logits_cached"]
    # a changed training row, or another max length, computes them anew
    lines = (data / "train.tsv").read_text().splitlines()
    lines[5] = "a superb superb film .\t1"
    (data / "train.tsv").write_text("\n".join(lines) + "\n")
    distill("sst-2", world["teacher"], "test", data, out, recipe, progress=False)
    assert calls == [40, 40]
    distill("sst-2", world["teacher"], "test", data, out, FinetuneRecipe(steps=2, **{**RECIPE, "max_seq_length": 9}),
            progress=False)
    assert calls == [40, 40, 40]
    # the teacher's files are part of the key
    import shutil

    changed = tmp_path / "teacher-copy"
    shutil.copytree(world["teacher"], changed)
    assert distill_module.teacher_fingerprint(changed) == distill_module.teacher_fingerprint(world["teacher"])
    with open(changed / "model.safetensors", "r+b") as fh:  # one byte of the last tensor's data
        fh.seek(-1, 2)
        last = fh.read(1)
        fh.seek(-1, 2)
        fh.write(bytes([last[0] ^ 1]))
    assert distill_module.teacher_fingerprint(changed) != distill_module.teacher_fingerprint(world["teacher"])
    # a torn cache file is not trusted
    (out / distill_module.TEACHER_CACHE).write_bytes(b"not safetensors")
    distill("sst-2", world["teacher"], "test", data, out, recipe, progress=False)
    assert calls == [40, 40, 40, 40]


# ---------------------------------------------------------------------------- learning
def test_a_student_learns_to_agree_with_its_teacher(world, tmp_path):
    """A random `test`-preset student, taught by the teacher alone (alpha = 1: no label is used)."""
    results = distill("sst-2", world["teacher"], "test", world["data"], tmp_path / "student",
                      FinetuneRecipe(steps=60, eval_every=30, **RECIPE), DistillSettings(alpha=1.0, temperature=2.0),
                      progress=False)
    dev = [line.split("\t")[0] for line in (world["data"] / "dev.tsv").read_text().splitlines()[1:]]
    teacher = [p.split("\t")[0] for p in predict_lines(world["teacher"], dev)]
    student = [p.split("\t")[0] for p in predict_lines(tmp_path / "student", dev)]
    agreement = np.mean([a == b for a, b in zip(teacher, student)])
    print(f"agreement {agreement:.3f}, student dev {results['best']}")
    assert agreement > 0.75  # chance is about 0.5 on balanced labels
    soft = [r["loss"] for r in read_metrics(tmp_path / "student" / "metrics.jsonl") if r["split"] == "train"]
    assert np.mean(soft[-5:]) < 0.5 * np.mean(soft[:5])


def test_regression_and_unlabelled_text(world, tmp_path):
    data = write_stsb(tmp_path / "stsb")
    finetune("sts-b", world["pretrained"], data, tmp_path / "teacher", FinetuneRecipe(steps=40, **RECIPE),
             progress=False)
    text = tmp_path / "extra.txt"
    text.write_text("good great fun .\tthe movie\n\nbad dull film .\tthe plot\nsuperb .\tit\n")
    results = distill("sts-b", tmp_path / "teacher", "test", data, tmp_path / "student",
                      FinetuneRecipe(steps=30, **RECIPE), DistillSettings(unlabelled=str(text)), progress=False)
    assert results["distillation"]["unlabelled_features"] == 3 and results["train_features"] == 303
    losses = [r["loss"] for r in read_metrics(tmp_path / "student" / "metrics.jsonl") if r["split"] == "train"]
    assert all(math.isfinite(x) for x in losses) and np.mean(losses[-5:]) < np.mean(losses[:5])
    config = json.loads((tmp_path / "student" / "config.json").read_text())
    assert config["problem_type"] == "regression" and config["albertlm_distillation"]["alpha"] == 0.5
    assert "pearson" in evaluate_dir(tmp_path / "student", data)["metrics"]


# ---------------------------------------------------------------------------- refusals
def test_refusals_are_one_line(world, tmp_path):
    data, teacher = world["data"], world["teacher"]
    other = _pretrained(tmp_path / "other-vocab", 90, seed=1)
    with pytest.raises(AlbertlmError, match="not the teacher's"):
        distill("sst-2", teacher, str(other), data, tmp_path / "o1", FinetuneRecipe(steps=1), progress=False)
    with pytest.raises(AlbertlmError, match="no such directory"):
        distill("sst-2", tmp_path / "missing", "test", data, tmp_path / "o2", progress=False)
    with pytest.raises(AlbertlmError, match="not a fine-tuned model"):
        distill("sst-2", world["pretrained"], "test", data, tmp_path / "o3", progress=False)
    with pytest.raises(AlbertlmError, match="neither a model directory nor a preset"):
        distill("sst-2", teacher, "albert-nano", data, tmp_path / "o4", progress=False)
    with pytest.raises(AlbertlmError, match="sequence classification, regression and token classification"):
        distill("squad-v1.1", teacher, "test", data, tmp_path / "o5", progress=False)
    with pytest.raises(AlbertlmError, match="--early-exit"):  # refused, not silently ignored
        distill("sst-2", teacher, "test", data, tmp_path / "o5b", FinetuneRecipe(steps=1, early_exit=True),
                progress=False)
    with pytest.raises(AlbertlmError, match="task sts-b is regression"):
        distill("sts-b", teacher, "test", data, tmp_path / "o6", progress=False)
    with pytest.raises(AlbertlmError, match="only change a preset"):
        distill("sst-2", teacher, str(world["pretrained"]), data, tmp_path / "o7",
                settings=DistillSettings(student_layers=1), progress=False)
    with pytest.raises(AlbertlmError, match="alpha"):
        DistillSettings(alpha=1.5)
    with pytest.raises(AlbertlmError, match="temperature"):
        DistillSettings(temperature=0.0)
    (tmp_path / "empty.txt").write_text("\n  \n")
    with pytest.raises(AlbertlmError, match="no text lines"):
        distill("sst-2", teacher, "test", data, tmp_path / "o8", FinetuneRecipe(steps=1, max_seq_length=32),
                DistillSettings(unlabelled=str(tmp_path / "empty.txt")), progress=False)
    three = write_sst(tmp_path / "three")
    (three / "train.tsv").write_text((three / "train.tsv").read_text() + "a neutral film .\t2\n")
    generic = get_task("classification", text_column="sentence")  # its label set comes from the data
    with pytest.raises(AlbertlmError, match=r"labels \['2'\] that the model does not know"):
        distill(generic, teacher, "test", three, tmp_path / "o9", FinetuneRecipe(steps=1), progress=False)
    assert not any((tmp_path / f"o{i}").exists() for i in range(1, 10))  # refused before writing anything


# ---------------------------------------------------------------------------- an ensemble of teachers
def test_ensemble_targets_are_the_mean_distribution():
    r = np.random.default_rng(0)
    t, T = r.normal(size=(5, 3, 4)) * 3, 2.0  # 5 rows, 3 teachers, 4 classes
    rows = t.reshape(5, 12).astype(np.float32)
    target = distill_module.ensemble_targets(rows, 3, "single_label_classification", T)
    mean = torch.softmax(torch.tensor(t) / T, -1).mean(1)
    assert target.shape == (5, 4)
    assert np.allclose(torch.softmax(torch.tensor(target, dtype=torch.float64) / T, -1), mean, atol=1e-5)
    # not the mean of the logits: that is the normalised geometric mean, another distribution
    assert not np.allclose(torch.softmax(torch.tensor(t.mean(1)) / T, -1), mean, atol=1e-3)
    labels = distill_module.ensemble_targets(rows, 3, "multi_label_classification", T)
    assert np.allclose(torch.sigmoid(torch.tensor(labels, dtype=torch.float64) / T),
                       torch.sigmoid(torch.tensor(t) / T).mean(1), atol=1e-5)
    scores = distill_module.ensemble_targets(r.normal(size=(5, 2)).astype(np.float32), 2, "regression", T)
    assert scores.shape == (5, 1)
    assert distill_module.ensemble_targets(rows, 1, "single_label_classification", T) is rows  # one: as it is


def test_an_ensemble_teaches_the_mean_of_its_members(world, tmp_path, capsys):
    """Two teachers of one tokenizer: their logits are cached side by side, each as it is alone, and the
    student is taught their mean; a rerun reads the cache, the config names both, bad ensembles are refused."""
    second = tmp_path / "teacher-2"
    finetune("sst-2", world["pretrained"], world["data"], second,
             FinetuneRecipe(steps=40, eval_every=40, seed=1, **RECIPE), progress=False)
    recipe = FinetuneRecipe(steps=4, **RECIPE)
    alone = [distill("sst-2", t, "test", world["data"], tmp_path / f"alone-{i}", recipe, progress=False)
             for i, t in enumerate((world["teacher"], second))]
    assert all(not a["distillation"]["teacher_logits_cached"] for a in alone)
    both = distill("sst-2", [world["teacher"], second], "test", world["data"], tmp_path / "both", recipe,
                   progress=False)
    from safetensors.numpy import load_file

    columns = load_file(str(tmp_path / "both" / distill_module.TEACHER_CACHE))["logits"]
    singles = [load_file(str(tmp_path / f"alone-{i}" / distill_module.TEACHER_CACHE))["logits"] for i in range(2)]
    assert columns.shape == (240, 4) and np.allclose(columns, np.concatenate(singles, axis=1), atol=1e-5)
    assert not np.allclose(singles[0], singles[1], atol=1e-2)  # two different teachers
    d = both["distillation"]
    assert d["teachers"] == [str(world["teacher"]), str(second)] and len(set(d["teacher_fingerprints"])) == 2
    config = json.loads((tmp_path / "both" / "config.json").read_text())["albertlm_distillation"]
    assert config["teachers"] == d["teachers"]
    # the same teachers in another order are another cache key
    swapped = distill("sst-2", [second, world["teacher"]], "test", world["data"], tmp_path / "both", recipe,
                      progress=False)
    assert not swapped["distillation"]["teacher_logits_cached"]
    code = main(["distill", "--teacher", str(second), "--teacher", str(world["teacher"]), "--student", "test",
                 "--task", "sst-2", "--data", str(world["data"]), "--out", str(tmp_path / "both"), "--steps", "4",
                 "--batch-size", "16", "--max-seq-length", "32", "--no-progress", "--device", "cpu"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "distilled from the mean of" in printed and "teacher logits from the cache" in printed
    # the soft targets are the members' mean distribution at T
    T = 2.0
    mean = torch.softmax(torch.tensor(singles[1]) / T, -1) / 2 + torch.softmax(torch.tensor(singles[0]) / T, -1) / 2
    target = distill_module.ensemble_targets(np.concatenate(singles[::-1], axis=1), 2, "single_label_classification", T)
    assert np.allclose(torch.softmax(torch.tensor(target) / T, -1), mean, atol=1e-5)
    # refusals: one directory twice, a member of another tokenizer
    with pytest.raises(AlbertlmError, match="the same directory is given twice"):
        distill("sst-2", [second, second], "test", world["data"], tmp_path / "x1", recipe, progress=False)
    other = _pretrained(tmp_path / "other-vocab", 80, seed=5)
    finetune("sst-2", other, world["data"], tmp_path / "other-teacher", FinetuneRecipe(steps=2, **RECIPE),
             progress=False)
    with pytest.raises(AlbertlmError, match="tokenize differently.*share one tokenizer"):
        distill("sst-2", [second, tmp_path / "other-teacher"], "test", world["data"], tmp_path / "x2", recipe,
                progress=False)
    import shutil

    swapped_classes = tmp_path / "teacher-swapped"
    shutil.copytree(second, swapped_classes)
    config = json.loads((swapped_classes / "config.json").read_text())
    config["id2label"] = {"0": config["id2label"]["1"], "1": config["id2label"]["0"]}
    config["label2id"] = {v: int(k) for k, v in config["id2label"].items()}
    (swapped_classes / "config.json").write_text(json.dumps(config))
    with pytest.raises(AlbertlmError, match="its classes are 1, 0, the first teacher's 0, 1"):
        distill("sst-2", [second, swapped_classes], "test", world["data"], tmp_path / "x3", recipe, progress=False)
    assert not any((tmp_path / f"x{i}").exists() for i in (1, 2, 3))


# ---------------------------------------------------------------------------- the command
def test_cli_end_to_end(world, tmp_path, capsys):
    tf = pytest.importorskip("transformers")
    out = tmp_path / "student"
    code = main(["distill", "--teacher", str(world["teacher"]), "--student", "test", "--task", "sst-2",
                 "--data", str(world["data"]), "--out", str(out), "--temperature", "3", "--alpha", "0.7",
                 "--student-layers", "2", "--steps", "8", "--batch-size", "16", "--max-seq-length", "32",
                 "--no-progress", "--device", "cpu"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "accuracy *" in printed and "8 steps" in printed and "distilled from" in printed
    results = json.loads((out / "results.json").read_text())
    assert results["distillation"]["temperature"] == 3.0 and results["distillation"]["alpha"] == 0.7
    assert len(results["distillation"]["teacher_fingerprint"]) == 64
    config = json.loads((out / "config.json").read_text())
    assert config["num_hidden_layers"] == 2 and config["albertlm_distillation"]["teacher"] == str(world["teacher"])
    assert (out / "teacher_logits.safetensors").is_file()
    assert main(["evaluate", "--model", str(out), "--data", str(world["data"]), "--json", "--device", "cpu"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"]["accuracy"] == pytest.approx(results["best"]["accuracy"])
    theirs, info = tf.AlbertForSequenceClassification.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    # errors are one line with exit status 2
    assert main(["distill", "--teacher", str(tmp_path / "nope"), "--student", "test", "--task", "sst-2",
                 "--data", str(world["data"]), "--out", str(tmp_path / "x")]) == 2
    assert "no such directory" in capsys.readouterr().err
    assert main(["distill", "--teacher", str(world["teacher"]), "--student", "test", "--task", "sst-2",
                 "--data", str(world["data"]), "--out", str(world["teacher"])]) == 2
    assert "would overwrite its own input" in capsys.readouterr().err


# ---------------------------------------------------------------------------- token classification
def test_token_terms_by_hand():
    """Soft KL at each word's first piece (soft_mask), hard CE at the tagged positions, each averaged."""
    student = [[[1.0, 0.0, 2.0], [0.5, 0.5, 0.0], [3.0, 1.0, 1.0]]]  # [B=1, S=3, C=3]
    teacher = [[[0.0, 1.0, 2.0], [1.0, 0.0, 0.0], [9.0, 9.0, 9.0]]]
    soft_mask, labels, T, alpha = [[1.0, 1.0, 0.0]], [[2, -100, 0]], 2.0, 0.3
    kl = distill_module._softmax_kl(torch.tensor(student[0][:2]), torch.tensor(teacher[0][:2]), T)  # [2]
    s = student[0]
    ce = [math.log(sum(math.exp(x) for x in s[0])) - s[0][2], math.log(sum(math.exp(x) for x in s[2])) - s[2][0]]
    loss_fn, count = token_distill_objective(T, alpha)
    batch = {"input_ids": torch.zeros(1, 3, dtype=torch.long), "labels": torch.tensor(labels),
             "teacher_logits": torch.tensor(teacher).transpose(1, 2), "soft_mask": torch.tensor(soft_mask)}
    totals = count(batch)
    assert totals == {"n": 2.0, "n_hard": 2.0}
    loss, _ = loss_fn(_Fixed(student), batch, totals)
    assert float(loss.detach()) == pytest.approx(alpha * float(kl.sum()) / 2 + (1 - alpha) * sum(ce) / 2, rel=1e-5)


@pytest.fixture(scope="module")
def ner_world(world) -> dict[str, Path]:
    """CoNLL-shaped files (test_finetune's) and a token-classification teacher fine-tuned on them."""
    from test_finetune import write_conll

    root = world["root"] / "ner"
    data = root / "conll"
    data.mkdir(parents=True)
    write_conll(data, random.Random(0))
    recipe = FinetuneRecipe(steps=60, eval_every=30, **RECIPE)
    results = finetune("conll2003", world["pretrained"], data, root / "teacher", recipe, progress=False)
    assert results["best"]["f1"] > 0.5, results["best"]  # a teacher worth learning from
    return {"data": data, "teacher": root / "teacher"}


def test_token_alpha_zero_equals_plain_finetuning(world, ner_world, tmp_path):
    assert_alpha_zero_is_finetuning("conll2003", world["pretrained"], ner_world["data"], ner_world["teacher"],
                                    tmp_path, 8)


def test_token_student_learns_from_the_teacher_and_unlabelled_text(world, ner_world, tmp_path):
    text = tmp_path / "extra.txt"
    text.write_text("Alice went to Paris .\n\nBob met Carol in Rome today .\n")
    recipe = FinetuneRecipe(steps=60, eval_every=30, **RECIPE)
    results = distill("conll2003", ner_world["teacher"], "test", ner_world["data"], tmp_path / "student", recipe,
                      DistillSettings(alpha=1.0, temperature=1.0, unlabelled=str(text)), progress=False)
    assert results["distillation"]["unlabelled_features"] == 2 and not results["distillation"]["teacher_logits_cached"]
    # soft targets only (alpha = 1): the student learns the task from the teacher alone
    assert results["best"]["f1"] > 0.5, results["best"]
    teacher_f1 = evaluate_dir(ner_world["teacher"], ner_world["data"])["metrics"]["f1"]
    assert evaluate_dir(tmp_path / "student", ner_world["data"])["metrics"]["f1"] > teacher_f1 - 0.3
    # per-token rows come back from the cache, one [S, C] block per feature
    again = distill("conll2003", ner_world["teacher"], "test", ner_world["data"], tmp_path / "student",
                    FinetuneRecipe(steps=2, **RECIPE), DistillSettings(unlabelled=str(text)), progress=False)
    assert again["distillation"]["teacher_logits_cached"]


def test_an_early_exit_teacher_teaches_and_its_heads_do_not_pass_on(world, tmp_path):
    """A teacher fine-tuned with exit heads is accepted; a student started from it is saved plain
    (distillation trains the final classifier only, so stale exit heads must not be announced)."""
    from albertlm.exit_heads import EXIT_HEADS_NAME, has_exit_heads
    from albertlm.inference.load import load_model_dir

    teacher = tmp_path / "ee-teacher"
    finetune("sst-2", world["pretrained"], world["data"], teacher,
             FinetuneRecipe(steps=4, early_exit=True, **RECIPE), progress=False)
    assert (teacher / EXIT_HEADS_NAME).is_file()
    distill("sst-2", teacher, str(teacher), world["data"], tmp_path / "student", FinetuneRecipe(steps=2, **RECIPE),
            progress=False)
    loaded = load_model_dir(tmp_path / "student")
    model, config = loaded.model, loaded.config
    assert not has_exit_heads(config) and type(model).__name__ == "AlbertForSequenceClassification"


def test_a_sharded_teachers_shards_are_part_of_its_fingerprint(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors.index.json").write_text('{"weight_map": {"a": "model-1.safetensors"}}')
    (tmp_path / "model-1.safetensors").write_bytes(b"shard one")
    before = distill_module.teacher_fingerprint(tmp_path)
    (tmp_path / "model-1.safetensors").write_bytes(b"shard 1ne")
    assert distill_module.teacher_fingerprint(tmp_path) != before
    (tmp_path / distill_module.TEACHER_CACHE).write_bytes(b"the student's own cache")  # not the teacher's
    (tmp_path / "notes.txt").write_text("not weights")
    after = distill_module.teacher_fingerprint(tmp_path)
    (tmp_path / "notes.txt").write_text("other words")
    assert distill_module.teacher_fingerprint(tmp_path) == after
