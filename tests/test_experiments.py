"""The experiment scripts' own logic (experiments/): the task corpus and the lever bases."""

from __future__ import annotations

import json
import random

from experiments import scratch_base, task_corpus
from albertlm.tasks.registry import get_task

from test_finetune import write_sst, write_stsb  # noqa: E402  (tests/ is on the path)


def test_single_texts_are_grouped_and_pairs_are_two_line_documents(tmp_path):
    write_sst(tmp_path, random.Random(0))
    sst = get_task("sst-2").read(tmp_path, "train", False)
    docs = task_corpus.corpus_text(sst, 16).strip().split("\n\n")
    assert len(docs) == -(-len(sst) // 16) and docs[0].splitlines() == [e.text_a for e in sst[:16]]
    (tmp_path / "stsb").mkdir()
    write_stsb(tmp_path / "stsb", random.Random(0))
    pairs = get_task("sts-b").read(tmp_path / "stsb", "train", False)
    docs = task_corpus.corpus_text(pairs, 16).strip().split("\n\n")
    assert len(docs) == len(pairs) and docs[3].splitlines() == [pairs[3].text_a, pairs[3].text_b]


def test_the_scripts_refuse_bad_flags_in_one_line(tmp_path, capsys):
    write_sst(tmp_path, random.Random(0))
    assert task_corpus.main(["--task", "sst-2", "--data", str(tmp_path), "--out", str(tmp_path / "c.txt"),
                             "--group", "0"]) == 2
    assert capsys.readouterr().err.strip() == "task_corpus: error: --group must be positive, got 0"
    assert scratch_base.main(["--task", "sst-2", "--data", str(tmp_path), "--out", str(tmp_path / "b"),
                              "--set", "colour=1"]) == 2
    assert "ScratchRecipe has no field 'colour'" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


def test_a_base_is_made_with_the_lever(tmp_path, capsys, monkeypatch):
    import dataclasses

    write_sst(tmp_path, random.Random(0))
    small = dataclasses.replace(scratch_base.DEFAULT_RECIPE, preset="test", vocab_size=80)
    monkeypatch.setattr(scratch_base, "DEFAULT_RECIPE", small)
    assert scratch_base.main(["--task", "sst-2", "--data", str(tmp_path), "--out", str(tmp_path / "b"),
                              "--set", "word_vectors=true"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["word_vectors"]["share"] > 0.5 and (tmp_path / "b" / "model.safetensors").exists()


def test_an_ensemble_of_classifiers_is_scored_beside_its_members(tmp_path, capsys):
    """Two tiny runs of different seeds (so different vocabularies) average; a model averaged with itself
    scores what it scores alone; one model alone, or a tagger, is refused in one line."""
    import dataclasses

    from experiments import ensemble_dev
    from albertlm.train import scratch

    write_sst(tmp_path, random.Random(0))
    small = dataclasses.replace(scratch.DEFAULT_RECIPE, name="test-small", preset="test", family_presets=(),
                                probe_steps=3)
    models = []
    for seed in (0, 1):
        recipe = small.with_finetune(seed=seed)
        scratch.finetune_from_scratch("sst-2", tmp_path, tmp_path / f"m{seed}", 1.0, recipe, progress=False)
        models.append(str(tmp_path / f"m{seed}"))
    capsys.readouterr()
    out = tmp_path / "ens.json"
    args = ["--task", "sst-2", "--data", str(tmp_path), "--out", str(out)]
    assert ensemble_dev.main([*args, "--model", models[0], "--model", models[1], "--model", models[0]]) == 0
    result = json.loads(out.read_text())
    alone = result["models"][models[0]]["accuracy"]
    expected = json.loads((tmp_path / "m0" / "results.json").read_text())["best"]["accuracy"]
    assert alone == expected  # scored as the run scored its best checkpoint
    assert result["ensembles"][f"{models[0]} + {models[0]}"]["accuracy"] == alone
    assert 0 <= result["ensembles"][f"{models[0]} + {models[1]}"]["accuracy"] <= 1
    assert len(result["ensembles"]) == 4  # three pairs and the three together
    assert ensemble_dev.main([*args, "--model", models[0]]) == 2
    assert capsys.readouterr().err.strip() == "ensemble_dev: error: --model: give two or more fine-tuned models to average"


def test_the_count_member_and_the_count_teacher(tmp_path, capsys):
    """The tf-idf LR as an ensemble member scores what the baselines score it; a count-taught student
    trains from a run's base with that run's recipe; out-of-fold targets are probabilities of the run's
    classes that no fit of the example's own label gave."""
    import dataclasses

    import numpy as np

    from experiments import count_teacher, ensemble_dev
    from albertlm.tasks.baselines import score_baselines
    from albertlm.train import scratch

    write_sst(tmp_path, random.Random(0))
    small = dataclasses.replace(scratch.DEFAULT_RECIPE, name="test-small", preset="test", family_presets=(),
                                probe_steps=3)
    run = tmp_path / "m0"
    scratch.finetune_from_scratch("sst-2", tmp_path, run, 1.0, small.with_finetune(seed=0), progress=False)
    capsys.readouterr()
    spec = get_task("sst-2")
    train, dev = spec.read(tmp_path, "train", False), spec.read(tmp_path, "dev", False)
    out = tmp_path / "ens.json"
    assert ensemble_dev.main(["--task", "sst-2", "--data", str(tmp_path), "--model", str(run), "--count-member",
                              "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["models"]["tfidf_lr"]["accuracy"] == score_baselines(spec, train, dev)["tfidf_lr"][0]["accuracy"]
    assert list(result["ensembles"]) == [f"{run} + tfidf_lr"]
    capsys.readouterr()

    labels = sorted({e.label for e in train})
    probs = count_teacher.out_of_fold(train, labels, 3, 0)
    assert probs.shape == (len(train), 2) and np.allclose(probs.sum(1), 1)
    assert not np.allclose(probs, count_teacher.out_of_fold(train, labels, 3, 1))  # other folds, other fits
    student = tmp_path / "ct"
    assert count_teacher.main(["--task", "sst-2", "--data", str(tmp_path), "--run", str(run), "--out",
                               str(student)]) == 0
    printed = json.loads(capsys.readouterr().out)
    record = json.loads((student / "results.json").read_text())
    assert record["best"] == printed["best"] and record["recipe"]["steps"] == json.loads(
        (run / "results.json").read_text())["recipe"]["steps"]
    assert record["distillation"]["count_teacher"] == "tfidf_lr out of fold"
    assert count_teacher.main(["--task", "conll2003", "--data", str(tmp_path), "--run", str(run), "--out",
                               str(tmp_path / "x")]) == 2
    assert "single-label classification" in capsys.readouterr().err
