"""`albertlm finetune` without --model (train/scratch.py) on tiny synthetic data, one run per family:
a task vocabulary, a random model, the count-based baseline beside the dev score, steps planned from
a timed probe to fit the budget; the output loads and evaluates, the base repeats the run exactly,
a rerun starts over, and every refusal is one line before any work."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from albertlm.cli import main
from albertlm.config import get_preset
from albertlm.errors import AlbertlmError
from albertlm.heads import HEADS
from albertlm.inference.load import load_tokenizer
from albertlm.tasks.registry import get_task
from albertlm.train import scratch
from albertlm.train.metrics import read_metrics
from albertlm.train.scratch import DEFAULT_RECIPE, ScratchRecipe, plan_steps

from test_finetune import CITIES, PEOPLE, VERBS, write_conll, write_sst, write_stsb  # noqa: E402  (tests/ is on the path)

HAVE_SKLEARN = importlib.util.find_spec("sklearn") is not None
SMALL = dataclasses.replace(DEFAULT_RECIPE, name="test-small", preset="test", family_presets=(), probe_steps=3)
"""The default recipe on the `test` preset: each run takes a second or two."""
BUDGET = "0.2"  # minutes


def write_rte(d: Path, r: random.Random) -> None:
    """A pair task (RTE's layout): entailment when both sentences name the same person."""
    for split, n in (("train", 200), ("dev", 40)):
        rows = ["index\tsentence1\tsentence2\tlabel"]
        for i in range(n):
            a, b = r.sample(PEOPLE, 2)
            same = r.random() < 0.5
            rows.append(f"{i}\t{a} went home .\tit was {a if same else b} .\t"
                        f"{'entailment' if same else 'not_entailment'}")
        (d / f"{split}.tsv").write_text("\n".join(rows) + "\n")


def write_chnsenticorp(d: Path, r: random.Random) -> None:
    pos, neg, fill = "好棒赞美", "差烂坏糟", "这个酒店房间服务早餐位置价格"
    for split, n in (("train", 200), ("dev", 40)):
        rows = ["label\ttext_a"]
        for _ in range(n):
            y = r.randint(0, 1)
            rows.append(f"{y}\t{''.join([*r.choices(fill, k=6), r.choice(pos if y else neg), *r.choices(fill, k=3)])}")
        (d / f"{split}.tsv").write_text("\n".join(rows) + "\n")


FAMILIES = {  # task -> (writer, a line for `albertlm predict`)
    "sst-2": (write_sst, "the movie was great fun ."),
    "rte": (write_rte, "john went home .\tit was john ."),
    "sts-b": (write_stsb, "good great film\tthe film was good ."),
    "conll2003": (write_conll, "john went to paris ."),
    "chnsenticorp": (write_chnsenticorp, "这个酒店很好"),
}


HEAD_FLAGS = {"sts-b": ["--objective", "task"]}
"""Graded pairs train a bi-encoder by default (tests/test_scratch_embed.py); the flag keeps the regression
head, the family these runs test."""


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, one_thread) -> dict[str, tuple[Path, Path, dict, str, str]]:
    """One run per family through the CLI: task -> (data, OUT, results.json, stdout, stderr)."""
    out = {}
    mp = pytest.MonkeyPatch()
    mp.setattr(scratch, "DEFAULT_RECIPE", SMALL)
    try:  # capsys is function-scoped: capture by hand
        for task, (writer, _) in FAMILIES.items():
            data = tmp_path_factory.mktemp(f"data-{task}")
            writer(data, random.Random(len(task)))
            target = tmp_path_factory.mktemp(f"out-{task}") / "out"
            stdout, stderr = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                code = main(["finetune", "--task", task, "--data", str(data), "--out", str(target), "--budget", BUDGET,
                             "--no-progress", "--device", "cpu", *HEAD_FLAGS.get(task, [])])
            assert code == 0, stderr.getvalue()
            results = json.loads((target / "results.json").read_text())
            out[task] = (data, target, results, stdout.getvalue(), stderr.getvalue())
    finally:
        mp.undo()
    return out


@pytest.mark.parametrize("task", FAMILIES)
def test_output_is_a_fine_tuned_directory_with_its_base(runs, task, capsys):
    data, out, results, _, _ = runs[task]
    for name in ("config.json", "model.safetensors", "spiece.model", "tokenizer_config.json", "results.json",
                 "metrics.jsonl", "recipe.json"):
        assert (out / name).is_file(), name
    for name in ("config.json", "model.safetensors", "spiece.model", "tokenizer_config.json"):
        assert (out / "base" / name).is_file(), name
    config = json.loads((out / "config.json").read_text())
    spec = get_task(task)
    assert config["architectures"] == [spec.family.head] and config["finetuning_task"] == task
    assert json.loads((out / "base" / "config.json").read_text())["architectures"] == ["AlbertForPreTraining"]
    assert results["model_dir"] == str(out / "base")
    # it evaluates to the best dev score the run recorded, and predicts
    assert main(["evaluate", "--model", str(out), "--data", str(data), "--json", "--device", "cpu"]) == 0
    scored = json.loads(capsys.readouterr().out)["metrics"]
    assert scored[spec.main_metric] == pytest.approx(results["best"][spec.main_metric], abs=1e-6)
    line = out.parent / "in.txt"
    line.write_text(FAMILIES[task][1] + "\n")
    assert main(["predict", "--model", str(out), str(line), "--device", "cpu"]) == 0
    assert capsys.readouterr().out.strip()
    assert HEADS[spec.family.head].from_pretrained(out).config.extra["finetuning_task"] == task


@pytest.mark.parametrize("task", FAMILIES)
def test_output_loads_in_transformers(runs, task):
    tf = pytest.importorskip("transformers")
    _, out, _, _, _ = runs[task]
    model, info = getattr(tf, get_task(task).family.head).from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]


def test_the_vocabulary_follows_the_language(runs):
    assert runs["chnsenticorp"][2]["from_scratch"]["vocabulary"]["language"] == "zh"
    assert json.loads((runs["chnsenticorp"][1] / "base" / "tokenizer_config.json").read_text())["albertlm"]["chinese"]
    for task in ("sst-2", "rte", "sts-b", "conll2003"):
        vocab = runs[task][2]["from_scratch"]["vocabulary"]
        assert vocab["language"] == "en" and vocab["requested_vocab_size"] == 8000
        assert vocab["cased"] is (task == "conll2003")  # taggers keep the case (DEFAULT_RECIPE.cased_families)
        config = json.loads((runs[task][1] / "base" / "tokenizer_config.json").read_text())
        assert config["do_lower_case"] is (task != "conll2003")
        assert vocab["vocab_size"] < 8000  # the tiny text supports fewer pieces
        assert json.loads((runs[task][1] / "base" / "config.json").read_text())["vocab_size"] == vocab["vocab_size"]


@pytest.mark.parametrize("task", FAMILIES)
def test_baseline_is_printed_and_recorded(runs, task):
    _, _, results, stdout, stderr = runs[task]
    best = {"sst-2": "tfidf_lr", "rte": "tfidf_lr", "chnsenticorp": "tfidf_lr", "sts-b": "ridge",
            "conll2003": "type_lookup"}[task]
    floor = {"sts-b": "mean", "conll2003": "all_o"}.get(task, "majority")
    assert "count-based baseline, same split: " in stdout and "baseline: " in stderr
    assert ("the same command with --unlabelled FILE" in stdout) == (task == "conll2003")  # told to taggers only
    if not HAVE_SKLEARN and task != "conll2003":  # the lookup taggers need no scikit-learn
        assert results["baseline"] is None and "albertlm[bench]" in results["baseline_note"]
        return
    b = results["baseline"]
    assert results["baseline_note"] is None
    assert (b["name"], b["floor"]["name"], b["metric"]) == (best, floor, results["main_metric"])
    assert f"{best} {100 * b['value']:.2f}" in stdout
    if task == "sts-b":  # a constant has no correlation
        assert b["floor"]["value"] is None and "undefined" in stdout
    else:
        assert f"{floor} {100 * b['floor']['value']:.2f}" in stdout
    assert 0 <= b["value"] <= 1 and set(b["all"]) >= {best, floor}


@pytest.mark.parametrize("task", FAMILIES)
def test_the_plan_fits_the_budget(runs, task):
    _, out, results, stdout, _ = runs[task]
    s = results["from_scratch"]
    plan, recipe = s["plan"], results["recipe"]
    assert s["budget_minutes"] == float(BUDGET) and plan["budget_s"] == pytest.approx(60 * float(BUDGET))
    assert plan["step_s"] == s["probe"]["step_s"] > 0 and plan["eval_s"] >= s["probe"]["eval_s"] > 0
    assert plan["planned_s"] == pytest.approx(plan["spent_s"] + plan["steps"] * plan["step_s"]
                                              + plan["evaluations"] * plan["eval_s"])
    assert plan["planned_s"] <= plan["budget_s"] * (1 - SMALL.reserve) + 1e-9
    assert plan["epoch_cap"] == -(-results["train_features"] * int(SMALL.epochs) // 32)
    assert plan["steps"] <= plan["epoch_cap"] and (plan["limited_by"] == "epochs") == (plan["steps"] == plan["epoch_cap"])
    # the run took exactly the planned steps, warmup and evaluations
    assert results["steps"] == recipe["steps"] == plan["steps"]
    assert recipe["warmup_steps"] == plan["warmup_steps"] == round(0.1 * plan["steps"])
    assert recipe["eval_every"] == plan["eval_every"] and len(results["dev_curve"]) == plan["evaluations"]
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl") if r["split"] == "eval"] == [
        step for step, _ in results["dev_curve"]]
    assert set(s["stages"]) == {"read_s", "base_s", "features_s", "baseline_s", "probe_s", "train_s", "total_s"}
    assert s["recipe"]["name"] == "test-small" and recipe["lr"] == 3e-4 and recipe["batch_size"] == 32
    assert f"budget {float(BUDGET):g} min: used " in stdout


def test_the_examples_cap_binds_only_on_a_large_training_set():
    r = dataclasses.replace(DEFAULT_RECIPE, epochs=10.0, max_examples=1_600)
    common = dict(budget_s=6000, spent_s=50, step_s=0.5, eval_s=2, batch_size=32)
    small = plan_steps(r, train_features=96, **common)  # 10 epochs are 30 steps, 960 examples: under the cap
    assert (small.steps, small.limited_by, small.epoch_cap) == (30, "epochs", 30)
    large = plan_steps(r, train_features=10_000, **common)  # 10 epochs would be 3,125 steps
    assert (large.steps, large.limited_by, large.epoch_cap) == (50, "examples", 50)  # 1,600 examples of 32
    uneven = plan_steps(dataclasses.replace(r, max_examples=1_601), train_features=10_000, **common)
    assert uneven.steps == 51 and uneven.steps * 32 >= 1_601  # rounded up to whole steps
    # the budget still wins when it holds fewer steps than either cap
    tight = plan_steps(r, train_features=10_000, **{**common, "budget_s": 70})
    assert tight.limited_by == "budget" and tight.steps < 50
    uncapped = plan_steps(dataclasses.replace(r, max_examples=None), train_features=10_000, **common)
    assert (uncapped.steps, uncapped.limited_by) == (3_125, "epochs")
    # the default caps SST-2's 67,349 training examples at 160,000 seen, and leaves ChnSentiCorp's 9,600 alone
    sst2 = plan_steps(DEFAULT_RECIPE, train_features=67_349, **common)
    chn = plan_steps(DEFAULT_RECIPE, train_features=9_600, **common)
    assert (sst2.steps, sst2.limited_by) == (5_000, "examples") and (chn.steps, chn.limited_by) == (3_000, "epochs")
    with pytest.raises(AlbertlmError, match="max_examples must be positive"):
        dataclasses.replace(DEFAULT_RECIPE, max_examples=0)


def test_plan_steps_by_budget_epochs_and_dev_size():
    r = dataclasses.replace(DEFAULT_RECIPE, epochs=3.0)
    by_budget = plan_steps(r, budget_s=600, spent_s=50, step_s=0.5, eval_s=2, train_features=100_000, batch_size=32)
    left = 600 * 0.95 - 50
    assert by_budget.limited_by == "budget" and by_budget.evaluations == 10
    assert by_budget.steps == int((left - 10 * 2) / 0.5) and by_budget.planned_s <= 600 * 0.95
    assert by_budget.warmup_steps == round(0.1 * by_budget.steps) and by_budget.eval_every == -(-by_budget.steps // 10)
    by_epochs = plan_steps(r, budget_s=600, spent_s=50, step_s=0.5, eval_s=2, train_features=320, batch_size=32)
    assert (by_epochs.steps, by_epochs.limited_by, by_epochs.eval_every, by_epochs.evaluations) == (30, "epochs", 3, 10)
    # a dev set whose evaluation is slow gets fewer evaluations: at most a quarter of the training time
    slow = plan_steps(r, budget_s=600, spent_s=50, step_s=0.5, eval_s=40, train_features=100_000, batch_size=32)
    assert slow.evaluations == 3 and slow.evaluations * 40 <= 0.25 * left and slow.planned_s <= 600 * 0.95
    with pytest.raises(AlbertlmError, match="--budget 1 minutes is too small: the setup took 58.0 s"):
        plan_steps(r, budget_s=60, spent_s=58, step_s=0.5, eval_s=2, train_features=100, batch_size=32)


def test_the_base_repeats_the_run_exactly(runs, tmp_path, capsys):
    """The recorded command from OUT/base (plain `finetune --model`) takes the same steps: same losses, same weights."""
    data, out, results, _, _ = runs["sst-2"]
    command = results["from_scratch"]["reproduce"]
    assert command[:2] == ["albertlm", "finetune"] and command[command.index("--model") + 1] == str(out / "base")
    assert main(command[1:] + ["--out", str(tmp_path / "again"), "--no-progress", "--device", "cpu"]) == 0
    capsys.readouterr()
    again = json.loads((tmp_path / "again" / "results.json").read_text())
    assert again["recipe"] == results["recipe"] and again["dev_curve"] == results["dev_curve"]

    def losses(path):
        return [r["loss"] for r in read_metrics(path / "metrics.jsonl") if r["split"] == "train"]

    assert losses(tmp_path / "again") == losses(out)
    a, b = load_file(out / "model.safetensors"), load_file(tmp_path / "again" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_word_vectors_start_the_base_word_table(runs, tmp_path, one_thread):
    """The default (word_vectors=True): base/ holds the vectors, where a run without them keeps the random
    rows of the same seed (specials and unseen pieces keep them either way), and results.json records
    them (the recorded command repeating such a run is test_the_base_repeats_the_run_exactly)."""
    data, vec, vec_results, _, _ = runs["sst-2"]
    record = vec_results["from_scratch"]["word_vectors"]
    assert SMALL.word_vectors and record["window"] == 5 and record["seconds"] >= 0 and record["pairs"] > 0
    plain = tmp_path / "out"
    results = scratch.finetune_from_scratch("sst-2", data, plain, float(BUDGET),
                                            dataclasses.replace(SMALL, word_vectors=False), progress=False)
    assert results["from_scratch"]["word_vectors"] is None
    key = "albert.embeddings.word_embeddings.weight"
    random_rows = load_file(plain / "base" / "model.safetensors")[key]
    table = load_file(vec / "base" / "model.safetensors")[key]
    assert table.shape == random_rows.shape
    kept = (table == random_rows).all(1)  # [V]: the rows left as the random init drew them
    assert kept[:5].all() and int((~kept).sum()) == record["rows"] and record["share"] == pytest.approx(
        record["rows"] / len(table), abs=1e-4)
    assert 0.5 < record["share"] < 1  # most pieces of a trained vocabulary occur beside others
    assert table[~kept].std().item() == pytest.approx(0.02, rel=0.01)


def test_too_little_text_for_word_vectors_keeps_the_random_table(tmp_path, one_thread, monkeypatch):
    """A text with too few contexts (word_vectors refuses it: test_word_vectors) leaves the table random."""
    from albertlm.tasks.registry import get_task
    from albertlm.train.word_vectors import TooLittleText

    def refuse(*args, **kwargs):
        raise TooLittleText("word vectors: the text gives 1 piece(s) a context within 5 pieces (at least 2 are "
                            "needed); it is too small to learn vectors from")

    monkeypatch.setattr(scratch, "fit_word_vectors", refuse)
    write_sst(tmp_path, random.Random(0))
    examples = get_task("sst-2").read(tmp_path, "train", False)
    lines = []
    _, record = scratch.make_base(examples, tmp_path / "base", SMALL, 0, False, lines.append)
    assert "too small to learn vectors from" in record["word_vectors"]["skipped"]
    assert any("the word table stays random" in line for line in lines)
    assert (tmp_path / "base" / "model.safetensors").exists()


@pytest.mark.parametrize("task", ["sst-2", "rte"])
def test_label_coordinates_start_a_single_text_classifier_only(tmp_path, one_thread, task):
    """label_vectors: a single-text classification task's base gets one coordinate from its two classes' labels
    (the last one, leaning to the class a word marks); a pair task's vectors come from the text alone."""
    write = write_sst if task == "sst-2" else write_rte
    write(tmp_path, random.Random(0))
    examples = get_task(task).read(tmp_path, "train", False)
    lines = []
    recipe = dataclasses.replace(SMALL, label_vectors=True)
    _, record = scratch.make_base(examples, tmp_path / "base", recipe, 0, False, lines.append)
    _, plain = scratch.make_base(examples, tmp_path / "plain", SMALL, 0, False, lambda line: None)
    key = "albert.embeddings.word_embeddings.weight"
    table = load_file(tmp_path / "base" / "model.safetensors")[key]
    before = load_file(tmp_path / "plain" / "model.safetensors")[key]
    assert record["word_vectors"]["rows"] == plain["word_vectors"]["rows"]
    if task == "rte":
        assert record["word_vectors"]["label_coordinates"] == 0 and torch.equal(table, before)
        return
    assert record["word_vectors"]["label_coordinates"] == 1
    assert any("1 of 16 coordinates from the labels" in line for line in lines), lines
    tok = load_tokenizer(tmp_path / "base")
    from test_finetune import NEG, POS

    lean = {w: float(table[tok.encode(w), -1].sum()) for w in POS + NEG}
    assert min(lean[w] for w in POS) > max(lean[w] for w in NEG), lean
    assert not torch.equal(table[:, -1], before[:, -1]) and torch.equal(table[:5], before[:5])


def test_label_coordinates_need_word_vectors():
    with pytest.raises(AlbertlmError, match="label_vectors starts coordinates of the word vectors: it needs"):
        dataclasses.replace(SMALL, word_vectors=False, label_vectors=True)


@pytest.mark.parametrize("cased", [False, True])
def test_a_cased_vocabulary_keeps_the_case(tmp_path, one_thread, cased):
    """cased_families picks the vocabulary's case: the tokenizer's record and its pieces follow it."""
    from albertlm.tasks.ner import TokenExample

    r = random.Random(0)
    examples = [TokenExample(str(i), [r.choice(PEOPLE).title(), r.choice(VERBS), "to", r.choice(CITIES).title(), "."],
                           ["I-PER", "O", "O", "I-LOC", "O"]) for i in range(300)]
    _, record = scratch.make_base(examples, tmp_path / "base", SMALL, 0, False, lambda line: None, cased=cased)
    assert record["cased"] is cased
    config = json.loads((tmp_path / "base" / "tokenizer_config.json").read_text())
    assert config["do_lower_case"] is (not cased)
    tokenizer = load_tokenizer(tmp_path / "base")
    pieces = tokenizer.convert_ids_to_tokens(tokenizer.encode("John went to Paris"))
    assert any(p.lstrip("\u2581")[:1].isupper() for p in pieces) is cased, pieces


@pytest.fixture
def seen(monkeypatch) -> dict:
    """The recipe the command line hands to finetune_from_scratch, which then stops (exit 2) before any work."""
    seen = {}

    def run(spec, data, out, budget, recipe, **kwargs):
        seen["recipe"] = recipe
        raise AlbertlmError("stopped here")
    monkeypatch.setattr(scratch, "finetune_from_scratch", run)
    return seen


@pytest.mark.parametrize("flag, families", [(None, DEFAULT_RECIPE.cased_families), ("cased", scratch.SUPPORTED),
                                           ("uncased", ())])
def test_vocab_case_sets_the_cased_families(tmp_path, seen, flag, families):
    write_sst(tmp_path, random.Random(4))
    flags = ["--vocab-case", flag] if flag else []
    assert main(["finetune", "--task", "sst-2", "--data", str(tmp_path), "--out", str(tmp_path / "out"), *flags]) == 2
    assert seen["recipe"].cased_families == families


def test_vocab_size_sets_the_recipe(tmp_path, seen, capsys):
    write_sst(tmp_path, random.Random(4))
    base = ["finetune", "--task", "sst-2", "--data", str(tmp_path), "--out", str(tmp_path / "out")]
    assert main([*base, "--vocab-size", "16000"]) == 2
    assert (seen["recipe"].vocab_size, seen["recipe"].chinese_vocab_size) == (16000, 16000)
    capsys.readouterr()
    assert main([*base, "--vocab-size", "5"]) == 2
    assert "--vocab-size must be at least 100, got 5" in one_line(capsys.readouterr().err)
    assert main([*base, "--vocab-size", "8000", "--model", "m"]) == 2
    assert "--vocab-size sets the vocabulary of a run without --model" in one_line(capsys.readouterr().err)


def test_preset_sets_the_architecture(tmp_path, seen, capsys):
    write_sst(tmp_path, random.Random(4))
    base = ["finetune", "--task", "sst-2", "--data", str(tmp_path), "--out", str(tmp_path / "out")]
    assert main(base) == 2
    assert seen["recipe"].preset == DEFAULT_RECIPE.preset == "albert-tiny"
    assert seen["recipe"].family_presets == DEFAULT_RECIPE.family_presets
    assert main([*base, "--preset", "albert-small"]) == 2
    assert seen["recipe"].preset == "albert-small" and seen["recipe"].vocab_size == DEFAULT_RECIPE.vocab_size
    assert seen["recipe"].family_presets == ()  # the flag names the architecture of every family
    capsys.readouterr()
    assert main([*base, "--preset", "albert-huge"]) == 2
    assert "--preset 'albert-huge' is unknown; choose one of albert-base" in one_line(capsys.readouterr().err)
    assert main([*base, "--preset", "albert-small", "--model", "m"]) == 2
    assert "--preset sets the architecture of a run without --model" in one_line(capsys.readouterr().err)


def test_a_family_s_preset_replaces_the_recipe_s():
    recipe = dataclasses.replace(DEFAULT_RECIPE, preset="albert-tiny", family_presets=(("ner", "albert-small"),))
    tagger, sentences = recipe.for_family("ner"), recipe.for_family("classification")
    assert (tagger.preset, sentences.preset) == ("albert-small", "albert-tiny")
    assert tagger.family_presets == sentences.family_presets == ()  # what ran is what results.json records
    assert recipe.with_preset("test").for_family("ner").preset == "test"
    # the default as docs/finetuning.md states it: albert-small for taggers, albert-tiny for the rest
    assert [DEFAULT_RECIPE.for_family(f).preset for f in scratch.SUPPORTED] == [
        "albert-small" if f == "ner" else "albert-tiny" for f in scratch.SUPPORTED]
    for bad in ((("tagging", "albert-small"),), (("ner", "albert-huge"),), (("ner", "test"), ("ner", "test")),
                ("ner", "test"), [("ner", "test")]):
        with pytest.raises(AlbertlmError, match="family_presets must be .family, preset. pairs"):
            ScratchRecipe(name="x", family_presets=bad)


def test_a_family_s_longest_max_length_replaces_the_recipe_s():
    """Taggers keep 128 (their long sentences are chunked), the sentence tasks take 256 (a cut review is lost text)."""
    tagger, sentences = DEFAULT_RECIPE.for_family("ner"), DEFAULT_RECIPE.for_family("classification")
    assert (tagger.seq_length_max, sentences.seq_length_max) == (128, 256)
    assert tagger.family_seq_length_max == sentences.family_seq_length_max == ()  # what results.json records
    for bad in ((("tagging", 128),), (("ner", 32),), (("ner", 128), ("ner", 96)), (("ner", "128"),),
                (("ner", True),), ("ner", 128), [("ner", 128)]):
        with pytest.raises(AlbertlmError, match="family_seq_length_max must be .family, length. pairs"):
            ScratchRecipe(name="x", family_seq_length_max=bad)


def test_a_family_s_preset_trains_that_shape_end_to_end(tmp_path, one_thread, monkeypatch):
    """A tagging task trains the preset family_presets names for it, from the command line's default recipe."""
    monkeypatch.setattr(scratch, "DEFAULT_RECIPE", dataclasses.replace(SMALL, preset="albert-tiny",
                                                                      family_presets=(("ner", "test"),)))
    write_conll(tmp_path, random.Random(2))
    out = tmp_path / "out"
    assert main(["finetune", "--task", "conll2003", "--data", str(tmp_path), "--out", str(out), "--budget", "1",
                 "--no-progress", "--device", "cpu"]) == 0
    recipe = json.loads((out / "results.json").read_text())["from_scratch"]["recipe"]
    assert (recipe["preset"], recipe["family_presets"]) == ("test", [])
    config = json.loads((out / "base" / "config.json").read_text())
    assert config["hidden_size"] == get_preset("test").hidden_size != get_preset("albert-tiny").hidden_size


def test_a_preset_trains_that_shape_end_to_end(tmp_path, one_thread, capsys):
    """--preset reaches the base model, the fine-tuned one and results.json."""
    data = tmp_path / "data"
    data.mkdir()
    write_sst(data, random.Random(7))
    out = tmp_path / "out"
    assert main(["finetune", "--task", "sst-2", "--data", str(data), "--out", str(out), "--budget", BUDGET,
                 "--preset", "test", "--no-progress", "--device", "cpu"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["from_scratch"]["recipe"]["preset"] == "test"
    shape = {k: get_preset("test").to_dict()[k] for k in ("hidden_size", "num_hidden_layers", "embedding_size")}
    for directory in (out / "base", out):
        config = json.loads((directory / "config.json").read_text())
        assert {k: config[k] for k in shape} == shape, directory
    assert "test from scratch: dev accuracy " in capsys.readouterr().out


def test_vocab_case_with_a_model_is_refused(tmp_path, capsys):
    assert main(["finetune", "--task", "sst-2", "--data", str(tmp_path), "--model", "m", "--vocab-case", "cased"]) == 2
    assert "--vocab-case sets the vocabulary of a run without --model" in one_line(capsys.readouterr().err)


def test_the_default_recipe_runs_end_to_end(tmp_path, one_thread, capsys):
    """albert-tiny itself, on a training set small enough for its epoch cap to take a few steps."""
    r = random.Random(7)
    write_sst(tmp_path, r)
    lines = (tmp_path / "train.tsv").read_text().splitlines()
    (tmp_path / "train.tsv").write_text("\n".join(lines[:33]) + "\n")  # 32 examples: one step of 32 an epoch
    out = tmp_path / "out"
    assert main(["finetune", "--task", "sst-2", "--data", str(tmp_path), "--out", str(out), "--budget", "0.5",
                 "--no-progress", "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    s = results["from_scratch"]
    assert "near_floor" in results and results["near_floor"] == scratch.near_floor(results)
    # the recipe as a sentence task runs it: the tagger's preset is not this family's
    assert s["recipe"] == json.loads(json.dumps(dataclasses.asdict(DEFAULT_RECIPE.for_family("classification"))))
    assert json.loads((out / "base" / "config.json").read_text())["hidden_size"] == 312  # albert-tiny
    epochs = int(DEFAULT_RECIPE.epochs)
    assert s["plan"]["steps"] == epochs and s["plan"]["limited_by"] == "epochs" and results["steps"] == epochs
    assert s["word_vectors"]["share"] > 0.1  # the default starts the word table from vectors of the text
    assert s["max_seq_length"] == 64 and "albert-tiny from scratch: dev accuracy " in printed


def test_rerun_starts_over_and_plain_finetune_does_not_mix(runs, tmp_path, capsys, monkeypatch, one_thread):
    monkeypatch.setattr(scratch, "DEFAULT_RECIPE", SMALL)
    data_sst, data_ner = tmp_path / "sst", tmp_path / "ner"
    data_sst.mkdir()
    data_ner.mkdir()
    write_sst(data_sst, random.Random(1))
    write_conll(data_ner, random.Random(2))
    out = tmp_path / "out"
    run = ["finetune", "--data", "--out", str(out), "--budget", BUDGET, "--no-progress", "--device", "cpu"]
    assert main([run[0], "--task", "sst-2", run[1], str(data_sst), *run[2:]]) == 0
    assert (out / "predictions_dev.tsv").is_file()
    assert main([run[0], "--task", "conll2003", run[1], str(data_ner), *run[2:]]) == 0
    assert "starting over" in capsys.readouterr().err
    assert not (out / "predictions_dev.tsv").exists() and (out / "predictions_dev.txt").is_file()
    assert json.loads((out / "results.json").read_text())["task"] == "conll2003"
    # fine-tuning another model into it would leave base/ beside a model that did not start from it
    before = sorted(p.name for p in out.iterdir())
    assert main(["finetune", "--task", "conll2003", "--model", str(runs["conll2003"][1] / "base"), "--data",
                 str(data_ner), "--out", str(out), "--steps", "2"]) == 2
    assert "holds files albertlm finetune did not write (base)" in one_line(capsys.readouterr().err)
    assert sorted(p.name for p in out.iterdir()) == before
    # and a directory holding someone else's files is refused before any work
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    assert main([run[0], "--task", "sst-2", run[1], str(data_sst), "--out", str(tmp_path / "mine")]) == 2
    assert "holds files albertlm did not write (notes.txt)" in one_line(capsys.readouterr().err)
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["notes.txt"]


def test_without_scikit_learn_the_baseline_says_how_to_get_it(tmp_path, capsys, monkeypatch, one_thread):
    monkeypatch.setattr(scratch, "DEFAULT_RECIPE", SMALL)
    monkeypatch.setitem(sys.modules, "sklearn", None)  # `import sklearn` raises ImportError
    write_sst(tmp_path, random.Random(3))
    assert main(["finetune", "--task", "sst-2", "--data", str(tmp_path), "--out", str(tmp_path / "out"), "--budget",
                 BUDGET, "--no-progress", "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["baseline"] is None
    assert results["baseline_note"].startswith("scikit-learn is not installed: pip install 'albertlm[bench]'")
    assert "count-based baseline, same split: not computed: scikit-learn is not installed: pip install " in printed


@pytest.mark.parametrize("flags, message", [
    (["--task", "sst-2", "--budget", "0"], "--budget must be a positive number of minutes, got 0"),
    (["--task", "sst-2", "--budget", "-3"], "--budget must be a positive number of minutes, got -3"),
    (["--task", "squad-v1.1"], "task squad-v1.1: without --model albertlm trains classification (single sentences, "
                               "pairs, regression) and NER tasks, not qa; give --model DIR"),
    (["--task", "race"], "not multiple choice; give --model DIR"),
    (["--task", "sst-2"], "no train file (looked for train.tsv)"),
    (["--task", "sst-2", "--steps", "10"], "--steps: without --model the budget sets the steps, warmup and evaluations"),
    (["--task", "sst-2", "--warmup-steps", "10"], "--warmup-steps: without --model the budget sets"),
    (["--task", "sst-2", "--max-seq-length", "1024"], "--max-seq-length 1024: albert-tiny has only 512 positions"),
    (["--task", "sst-2", "--model", "m", "--budget", "5"], "--budget sizes a run without --model"),
    (["--task", "conll2003", "--pooler-reinit"], "--pooler-reinit: task conll2003 uses an "
                                                 "AlbertForTokenClassification, which has no sentence vector"),
])
def test_refusals_are_one_line_before_any_work(tmp_path, capsys, flags, message):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "dev.tsv").write_text("sentence\tlabel\ngood .\t1\n")  # no train split
    out = tmp_path / "out"
    assert main(["finetune", "--data", str(tmp_path / "data"), "--out", str(out), *flags]) == 2
    assert message in one_line(capsys.readouterr().err)
    assert not out.exists()


def test_the_recipe_is_checked():
    with pytest.raises(AlbertlmError, match="unknown"):
        ScratchRecipe(name="x", preset="albert-nope")
    with pytest.raises(AlbertlmError, match="steps: the budget sets"):
        ScratchRecipe(name="x", finetune=dataclasses.replace(DEFAULT_RECIPE.finetune, steps=5))
    with pytest.raises(AlbertlmError, match="eval_share"):
        ScratchRecipe(name="x", eval_share=1.5)
    with pytest.raises(AlbertlmError, match="cased_families must be a tuple of classification, ner"):
        ScratchRecipe(name="x", cased_families=("tagging",))
    with pytest.raises(AlbertlmError, match="cased_families"):
        ScratchRecipe(name="x", cased_families="ner")  # a string, not a tuple of names
    with pytest.raises(AlbertlmError, match="ema_families must be a tuple of classification, ner"):
        ScratchRecipe(name="x", ema_families=("regression",))
    assert DEFAULT_RECIPE.with_finetune(lr=1e-3, seed=2).finetune.lr == 1e-3


def test_seq_length_comes_from_the_data():
    from albertlm.tasks.glue import TextExample

    class Pieces:  # one piece per character
        def encode(self, text):
            return np.zeros(len(text), dtype=np.int32)

    short = [TextExample(str(i), "x" * 10) for i in range(100)]
    long = [TextExample(str(i), "x" * 100, "y" * 20) for i in range(100)]
    middle = [TextExample(str(i), "x" * 70) for i in range(100)]
    assert scratch.choose_seq_length(short, Pieces(), DEFAULT_RECIPE, 512) == 64
    assert scratch.choose_seq_length(middle, Pieces(), DEFAULT_RECIPE, 512) == 96  # 72 pieces, to a multiple of 32
    assert scratch.choose_seq_length(long, Pieces(), DEFAULT_RECIPE, 512) == 128
    assert scratch.choose_seq_length(long, Pieces(), DEFAULT_RECIPE, 64) == 64  # the model's positions
    review = [TextExample(str(i), "x" * (150 + i)) for i in range(100)]  # 95% hold 247 pieces: 256
    assert scratch.choose_seq_length(review, Pieces(), DEFAULT_RECIPE, 512) == 256
    book = [TextExample(str(i), "x" * 1000) for i in range(100)]
    assert scratch.choose_seq_length(book, Pieces(), DEFAULT_RECIPE, 512) == DEFAULT_RECIPE.seq_length_max == 256
    assert scratch.choose_seq_length(book, Pieces(), DEFAULT_RECIPE.for_family("ner"), 512) == 128  # a tagger's cap


@pytest.mark.parametrize("limited_by,improving", [("budget", True), ("epochs", True), ("examples", True),
                                                  ("budget", False)])
def test_the_verdict_says_whether_a_longer_budget_could_help(limited_by, improving):
    from albertlm.train.scratch import format_scratch

    results = {"main_metric": "accuracy", "steps": 6314, "best": {"accuracy": 0.80}, "model_dir": "OUT/base", "baseline_note": None,
               "best_step": 6314 if improving else 1400, "improving_at_end": improving,
               "baseline": {"metric": "accuracy", "name": "tfidf_lr", "value": 0.815,
                            "floor": {"name": "majority", "value": 0.51}},
               "from_scratch": {"recipe": {"preset": "albert-tiny"}, "budget_minutes": 40.0,
                                "stages": {"total_s": 1200.0}, "plan": {"steps": 6314, "limited_by": limited_by}}}
    text = format_scratch(results)
    assert "the count-based baseline beats the model" in text
    assert ("a longer --budget may close the gap" in text) == (limited_by == "budget" and improving)
    assert ("would not change it" in text) == (limited_by != "budget")
    assert ("best dev score came at step 1,400 of 6,314" in text) == (not improving)
    cap = {"budget": "the budget", "epochs": "the epoch cap", "examples": "the cap on examples seen"}[limited_by]
    assert f"limited by {cap})" in text


@pytest.mark.parametrize("accuracy,majority,n,near", [
    (0.5560, 0.5271, 277, True),  # RTE's dev set: 2.9 points over the majority, one standard error (3.0)
    (0.6606, 0.6913, 1043, True),  # under the majority
    (0.5560, 0.5271, 20000, False),  # the same scores on a large dev set: 0.35-point errors
    (0.8200, 0.5092, 872, False),  # SST-2
    (0.8200, None, 872, False),  # no majority floor (a tagger's, a regressor's)
])
def test_a_score_within_noise_of_the_majority_class_is_said(accuracy, majority, n, near):
    from albertlm.train.scratch import NOISE_ERRORS, format_scratch, near_floor

    floor = {"name": "majority", "value": majority, "metrics": {"accuracy": majority}} if majority is not None else None
    results = {"main_metric": "accuracy", "steps": 779, "best": {"accuracy": accuracy}, "model_dir": "OUT/base",
               "baseline_note": None, "best_step": 156, "improving_at_end": False, "dev_examples": n,
               "baseline": {"metric": "accuracy", "name": "tfidf_lr", "value": 0.4982, "floor": floor},
               "from_scratch": {"recipe": {"preset": "albert-tiny"}, "budget_minutes": 40.0,
                                "stages": {"total_s": 530.0}, "plan": {"steps": 779, "limited_by": "epochs"}}}
    found = near_floor(results)
    assert (found is not None) == near
    text = format_scratch(results)
    assert ("it has not shown that it learned this task" in text) == near
    if near:
        se = (majority * (1 - majority) / n) ** 0.5
        assert found["standard_error"] == pytest.approx(se) and accuracy - majority < NOISE_ERRORS * se
        assert f"{NOISE_ERRORS:g} x {100 * se:.2f} points on {n:,} dev examples" in text


@pytest.mark.parametrize("tagger,unlabelled", [(True, None), (True, {"specs": ["more.txt"]}), (False, None)])
def test_a_tagger_without_unlabelled_text_is_told_of_the_flag(tagger, unlabelled):
    from albertlm.train.scratch import format_scratch

    results = {"main_metric": "f1", "steps": 100, "best": {"f1": 0.70}, "model_dir": "OUT/base", "baseline_note": None,
               "best_step": 100, "improving_at_end": True,
               "baseline": {"metric": "f1", "name": "type_lookup", "value": 0.68, "floor": {"name": "all_o", "value": 0.0}},
               "from_scratch": {"recipe": {"preset": "albert-tiny"}, "budget_minutes": 40.0, "unlabelled": unlabelled,
                                "stages": {"total_s": 600.0}, "plan": {"steps": 100, "limited_by": "epochs"}}}
    text = format_scratch(results, tagger=tagger)
    assert ("the same command with --unlabelled FILE" in text) == (tagger and unlabelled is None)


def test_a_machine_slower_than_the_probe_stops_at_the_deadline(tmp_path, one_thread, capsys, monkeypatch):
    """The probe says steps are free, so the plan holds the whole epoch cap; the clock stops the run
    inside the budget, evaluated at the step it stopped, its best checkpoint kept."""
    monkeypatch.setattr(scratch, "DEFAULT_RECIPE", dataclasses.replace(SMALL, epochs=100000.0))
    monkeypatch.setattr(scratch, "probe", lambda *args: (1e-6, 1e-6))
    write_sst(tmp_path, random.Random(3))
    out, budget = tmp_path / "out", 0.2  # 12 s
    assert main(["finetune", "--task", "sst-2", "--data", str(tmp_path), "--out", str(out), "--budget", str(budget),
                 "--no-progress", "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    s = results["from_scratch"]
    assert results["stopped_by"] == "deadline" and 0 < results["steps"] < s["plan"]["steps"]
    assert results["dev_curve"][-1][0] == results["steps"]  # evaluated where it stopped
    assert s["stages"]["total_s"] <= 60 * budget
    assert (out / "model.safetensors").is_file() and "stopped by the clock at step" in printed
    assert f"({results['steps']:,} steps, limited by the " in printed  # the steps run, not the planned


def write_unlabelled(path: Path, n: int) -> Path:
    """Sentences of the synthetic task's words in new orders, without labels, and a blank line between two
    documents (blank lines are no sentences)."""
    from test_finetune import FILL, NEG, POS

    r = random.Random(5)
    lines = [" ".join(r.choices(POS + NEG + FILL, k=8)) + " ." for _ in range(n)]
    path.write_text("\n".join(lines[: n // 2] + [""] + lines[n // 2:]) + "\n")
    return path


def test_unlabelled_text_joins_the_word_vectors(runs, tmp_path, capsys, monkeypatch, one_thread):
    """--unlabelled: its sentences are read and counted with the training text's for the word vectors (more
    co-occurrence pairs, another table), the vocabulary stays the training text's, and both are recorded."""
    monkeypatch.setattr(scratch, "DEFAULT_RECIPE", SMALL)
    data, plain, plain_results, _, _ = runs["sst-2"]
    extra = write_unlabelled(tmp_path / "extra.txt", 400)
    out = tmp_path / "out"
    assert main(["finetune", "--task", "sst-2", "--data", str(data), "--out", str(out), "--budget", BUDGET,
                 "--no-progress", "--device", "cpu", "--unlabelled", str(extra)]) == 0
    err = capsys.readouterr().err
    s = json.loads((out / "results.json").read_text())["from_scratch"]
    assert s["unlabelled"]["texts"] == 400 and s["unlabelled"]["specs"] == [str(extra)]
    assert not s["unlabelled"]["truncated"] and f"unlabelled text: 400 sentences from {extra}" in err
    assert s["word_vectors"]["unlabelled_texts"] == 400 and "and 400 unlabelled sentences" in err
    assert plain_results["from_scratch"]["unlabelled"] is None
    assert (out / "base" / "spiece.model").read_bytes() == (plain / "base" / "spiece.model").read_bytes()
    key = "albert.embeddings.word_embeddings.weight"
    table = load_file(out / "base" / "model.safetensors")[key]
    assert not torch.equal(table, load_file(plain / "base" / "model.safetensors")[key])
    # the rows are the vectors of the training text and the unlabelled sentences together, in that order
    from albertlm.tasks.baselines import example_texts
    from albertlm.tokenizer import load_vocabulary
    from albertlm.train.word_vectors import fit_word_vectors

    config = json.loads((out / "base" / "config.json").read_text())
    texts = [*example_texts(get_task("sst-2").read(data, "train", False)), *extra.read_text().split("\n")]
    expected = fit_word_vectors([t for t in texts if t.strip()], load_vocabulary(out / "base"),
                                config["embedding_size"], config["initializer_range"],
                                torch.Generator().manual_seed(0))
    assert int(expected.initialised.sum()) == s["word_vectors"]["rows"]
    assert torch.allclose(table[expected.initialised], expected.vectors[expected.initialised])
    assert "unlabelled_s" in s["stages"]


def test_unlabelled_text_is_read_up_to_the_recipe_limit(tmp_path, one_thread):
    write_sst(tmp_path, random.Random(4))
    extra = write_unlabelled(tmp_path / "extra.txt", 50)
    lines = []
    results = scratch.finetune_from_scratch("sst-2", tmp_path, tmp_path / "out", float(BUDGET),
                                            dataclasses.replace(SMALL, unlabelled_max_texts=20), progress=False,
                                            log=lines.append, unlabelled=[str(extra)])
    record = results["from_scratch"]["unlabelled"]
    assert record["texts"] == 20 and record["truncated"]
    assert any("20 sentences (the first 20: the recipe's limit)" in line for line in lines)


@pytest.mark.parametrize("flags, message", [
    (["--unlabelled", "{tmp}/missing.txt"], "corpus '{tmp}/missing.txt': no file matches"),
    (["--unlabelled", "{tmp}/extra.txt", "--model", "m"], "--unlabelled feeds the word vectors of a run without "
                                                          "--model"),
])
def test_unlabelled_refusals_are_one_line_before_any_work(tmp_path, capsys, flags, message):
    write_sst(tmp_path, random.Random(4))
    write_unlabelled(tmp_path / "extra.txt", 10)
    out = tmp_path / "out"
    flags = [f.format(tmp=tmp_path) for f in flags]
    assert main(["finetune", "--task", "sst-2", "--data", str(tmp_path), "--out", str(out), *flags]) == 2
    assert message.format(tmp=tmp_path) in one_line(capsys.readouterr().err)
    assert not out.exists()


def test_unlabelled_text_needs_a_recipe_with_word_vectors(tmp_path):
    write_sst(tmp_path, random.Random(4))
    extra = write_unlabelled(tmp_path / "extra.txt", 10)
    with pytest.raises(AlbertlmError, match="--unlabelled: recipe test-small starts no word vectors"):
        scratch.finetune_from_scratch("sst-2", tmp_path, tmp_path / "out", 1.0,
                                      dataclasses.replace(SMALL, word_vectors=False), unlabelled=[str(extra)])
    assert not (tmp_path / "out").exists()


def test_averaged_weights_take_one_evaluation_interval_and_the_flag_overrides(tmp_path, one_thread, capsys,
                                                                              monkeypatch):
    """ema_intervals sets the decay from the plan; --ema-decay 0 turns it off; the printed verdict names both."""
    monkeypatch.setattr(scratch, "DEFAULT_RECIPE", dataclasses.replace(SMALL, ema_intervals=1.0,
                                                                      ema_families=scratch.SUPPORTED))
    write_sst(tmp_path, random.Random(5))
    runs = {}
    for name, flags in (("averaged", []), ("off", ["--ema-decay", "0"]), ("given", ["--ema-decay", "0.5"])):
        out = tmp_path / name
        # a budget the epoch cap binds well inside, so that the plan (steps, evaluations) is the same for every
        # run however loaded the machine is: a budget-limited plan differs between the runs (averaging scores
        # both weights, so each evaluation is planned at twice the cost) and the curves would not compare
        assert main(["finetune", "--task", "sst-2", "--data", str(tmp_path), "--out", str(out), "--budget", "1",
                     "--no-progress", "--device", "cpu", *flags]) == 0
        runs[name] = (json.loads((out / "results.json").read_text()), capsys.readouterr())
    results, printed = runs["averaged"]
    every = results["from_scratch"]["plan"]["eval_every"]
    assert results["recipe"]["ema_decay"] == pytest.approx(1 - 1 / every)
    raw = results["trained_weights"]
    assert [s for s, _ in raw["dev_curve"]] == [s for s, _ in results["dev_curve"]]
    assert raw["best"] == max(v for _, v in raw["dev_curve"])
    assert "the averaged weights, decay" in printed.out and "trained weights' best" in printed.out
    assert "--ema-decay" in results["from_scratch"]["reproduce"]
    off, printed = runs["off"]
    assert results["from_scratch"]["plan"]["limited_by"] == off["from_scratch"]["plan"]["limited_by"] == "epochs"
    assert off["recipe"]["ema_decay"] is None and "trained_weights" not in off
    assert "the averaged weights" not in printed.out
    # the same training either way: the trained weights of the averaged run score as the run without averaging
    assert raw["dev_curve"] == off["dev_curve"]
    given, _ = runs["given"]
    assert given["recipe"]["ema_decay"] == 0.5 and "trained_weights" in given


def test_the_recipe_averages_only_the_families_it_names(tmp_path, one_thread, monkeypatch):
    """ema_families limits the recipe's averaging; --ema-decay still turns it on for any family."""
    monkeypatch.setattr(scratch, "DEFAULT_RECIPE", dataclasses.replace(SMALL, ema_intervals=1.0, ema_families=("ner",)))
    results = {}
    for task, flags in (("sst-2", []), ("conll2003", []), ("sst-2", ["--ema-decay", "0.9"])):
        data = tmp_path / task
        data.mkdir(exist_ok=True)
        FAMILIES[task][0](data, random.Random(3))
        out = tmp_path / f"out-{task}-{len(flags)}"
        assert main(["finetune", "--task", task, "--data", str(data), "--out", str(out), "--budget", "0.5",
                     "--no-progress", "--device", "cpu", *flags]) == 0
        results[task, bool(flags)] = json.loads((out / "results.json").read_text())
    assert results["sst-2", False]["recipe"]["ema_decay"] is None and "trained_weights" not in results["sst-2", False]
    ner = results["conll2003", False]
    assert ner["recipe"]["ema_decay"] == pytest.approx(1 - 1 / ner["from_scratch"]["plan"]["eval_every"])
    assert "trained_weights" in ner
    assert results["sst-2", True]["recipe"]["ema_decay"] == 0.9


def test_a_negative_ema_horizon_is_refused():
    with pytest.raises(AlbertlmError, match="ema_intervals must be 0"):
        ScratchRecipe(name="x", ema_intervals=-1.0)


# ---------------------------------------------------------------------------- self-distillation
@pytest.mark.parametrize("task", ["sst-2", "conll2003"])
def test_self_distillation_trains_a_second_model_taught_by_the_first(task, tmp_path, one_thread, capsys, monkeypatch):
    """--self-distill on, a budget that holds two rounds: the first model is a whole fine-tuned directory in
    OUT/teacher, the run's model is a student of it from the same base (seed + 1), and the recorded
    `albertlm distill` command trains that student again to the same curve and weights."""
    monkeypatch.setattr(scratch, "DEFAULT_RECIPE", SMALL)
    FAMILIES[task][0](tmp_path, random.Random(11))
    out = tmp_path / "out"
    assert main(["finetune", "--task", task, "--data", str(tmp_path), "--out", str(out), "--budget", "0.5",
                 "--no-progress", "--device", "cpu", "--self-distill", "on"]) == 0
    captured = capsys.readouterr()
    results = json.loads((out / "results.json").read_text())
    s, sd = results["from_scratch"], results["self_distillation"]
    first = json.loads((out / "teacher" / "results.json").read_text())
    assert s["self_distill"].startswith("the budget holds two rounds")
    assert sd["teacher_dir"] == str(out / "teacher") and sd["teacher"]["best"] == first["best"]
    assert sd["teacher"]["dev_curve"] == first["dev_curve"] and first["recipe"]["seed"] == 0
    assert results["recipe"]["seed"] == 1 and results["recipe"]["steps"] == first["recipe"]["steps"]
    assert results["distillation"]["teacher"] == str(out / "teacher") and results["model_dir"] == str(out / "base")
    config = json.loads((out / "config.json").read_text())
    assert config["albertlm_distillation"]["teacher"] == str(out / "teacher")
    assert (out / "teacher" / "model.safetensors").is_file() and (out / "teacher" / "spiece.model").is_file()
    assert "self-distillation: the budget holds two rounds" in captured.err
    assert f"distilled from the first model, {out / 'teacher'}: its best dev" in captured.out
    teacher, student = load_file(out / "teacher" / "model.safetensors"), load_file(out / "model.safetensors")
    assert not all(torch.equal(teacher[k], student[k]) for k in teacher)  # two models, not one saved twice

    command = s["reproduce_student"]
    assert command[:2] == ["albertlm", "distill"] and "--seed" in command
    assert main(command[1:] + ["--out", str(tmp_path / "again"), "--no-progress", "--device", "cpu"]) == 0
    capsys.readouterr()
    again = json.loads((tmp_path / "again" / "results.json").read_text())
    assert again["dev_curve"] == results["dev_curve"]
    b = load_file(tmp_path / "again" / "model.safetensors")
    assert student.keys() == b.keys() and all(torch.equal(student[k], b[k]) for k in student)


def test_self_distillation_is_skipped_where_the_budget_holds_one_round(tmp_path, one_thread, capsys, monkeypatch):
    """A plan the budget limits fills it: no second round, one model in OUT, the reason on the terminal and
    in results.json."""
    monkeypatch.setattr(scratch, "DEFAULT_RECIPE", dataclasses.replace(SMALL, epochs=100000.0))
    monkeypatch.setattr(scratch, "probe", lambda *args: (0.05, 0.05))
    write_sst(tmp_path, random.Random(3))
    out = tmp_path / "out"
    assert main(["finetune", "--task", "sst-2", "--data", str(tmp_path), "--out", str(out), "--budget", "0.1",
                 "--no-progress", "--device", "cpu", "--self-distill", "on"]) == 0
    err = capsys.readouterr().err
    results = json.loads((out / "results.json").read_text())
    assert results["from_scratch"]["plan"]["limited_by"] == "budget"
    assert results["from_scratch"]["self_distill"].startswith("skipped: the budget holds one round")
    assert "self_distillation" not in results and "distillation" not in results and not (out / "teacher").exists()
    assert "self-distillation: skipped: the budget holds one round of this plan" in err


def test_self_distillation_names_why_a_run_cannot_have_it():
    from types import SimpleNamespace

    recipe = dataclasses.replace(SMALL, self_distill_families=scratch.SUPPORTED)
    plan = plan_steps(recipe, budget_s=600, spent_s=1, step_s=0.01, eval_s=0.01, train_features=100, batch_size=10)

    def run(task, **changes):
        return SimpleNamespace(spec=get_task(task), recipe=dataclasses.replace(SMALL.finetune, seed=0, **changes),
                               train_f=[0] * 100, dev_f=[0] * 10)

    assert scratch.second_round(recipe, plan, run("sst-2"), scratch.TaskHead())[0]
    assert scratch.second_round(dataclasses.replace(SMALL, self_distill_families=("ner",)), plan, run("sst-2"),
                                scratch.TaskHead()) == (False, "off")
    assert "early-exit" in scratch.second_round(recipe, plan, run("sst-2", early_exit=True), scratch.TaskHead())[1]
    assert "--mlm-weight" in scratch.second_round(recipe, plan, run("sst-2", mlm_weight=0.1), scratch.TaskHead())[1]
    assert "sentence embedder" in scratch.second_round(recipe, plan, run("sts-b"), scratch.ScratchTarget())[1]
    with pytest.raises(AlbertlmError, match="self_distill_families must be a tuple of classification, ner"):
        dataclasses.replace(SMALL, self_distill_families=("regression",))
    with pytest.raises(AlbertlmError, match="self_distill_temperature must lie in"):
        dataclasses.replace(SMALL, self_distill_temperature=0.0)
    with pytest.raises(AlbertlmError, match="self_distill_alpha in"):
        dataclasses.replace(SMALL, self_distill_alpha=1.5)


def test_self_distill_with_a_model_is_refused(tmp_path, capsys):
    assert main(["finetune", "--task", "sst-2", "--data", str(tmp_path), "--model", "m", "--self-distill", "on"]) == 2
    assert "--self-distill trains a second model in a run without --model" in one_line(capsys.readouterr().err)
