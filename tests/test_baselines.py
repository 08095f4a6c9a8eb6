"""The count-based baselines (albertlm.tasks.baselines) on tiny synthetic task files: every baseline
runs, the fitted ones beat the majority class where the data is learnable, the lookup tagger is
perfect on its own training set; benchmarks.baselines' results JSON is well-formed (no NaN)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

pytest.importorskip("sklearn")

from test_finetune import CITIES, COLORS, NEG, PEOPLE, POS, VERBS, _sent  # noqa: E402

from albertlm.tasks import baselines  # noqa: E402


@pytest.fixture(scope="module")
def bench():
    from benchmarks import baselines as script

    return script


def write_sst(d: Path, r: random.Random) -> None:
    """The label is carried by one sentiment word; 60% of the examples are positive."""
    d.mkdir(parents=True)
    for split, n in (("train", 400), ("dev", 60)):
        rows = ["sentence\tlabel"]
        for _ in range(n):
            y = int(r.random() < 0.6)
            rows.append(f"{_sent(r, r.choice(POS if y else NEG))} .\t{y}")
        (d / f"{split}.tsv").write_text("\n".join(rows) + "\n")


def write_rte(d: Path, r: random.Random) -> None:
    """Entailment exactly when both sentences name the same colour (no other word is on both
    sides): learnable only from the overlap."""
    d.mkdir(parents=True)
    for split, n in (("train", 400), ("dev", 60)):
        rows = ["index\tsentence1\tsentence2\tlabel"]
        for i in range(n):
            a, b = r.sample(COLORS, 2)
            same = r.random() < 0.5
            label = "entailment" if same else "not_entailment"
            rows.append(f"{i}\tthe {r.choice(PEOPLE)} car is {a} .\tit went to {r.choice(CITIES)} painted "
                        f"{a if same else b}\t{label}")
        (d / f"{split}.tsv").write_text("\n".join(rows) + "\n")


def write_chnsenticorp(d: Path, r: random.Random) -> None:
    d.mkdir(parents=True)
    pos, neg, fill = "好棒赞美", "差烂坏糟", "这个酒店房间服务早餐位置价格"
    for split, n in (("train", 200), ("dev", 60)):
        rows = ["label\ttext_a"]
        for _ in range(n):
            y = r.randint(0, 1)
            text = "".join([*r.choices(fill, k=6), r.choice(pos if y else neg), *r.choices(fill, k=3)])
            rows.append(f"{y}\t{text}")
        (d / f"{split}.tsv").write_text("\n".join(rows) + "\n")


def write_stsb(d: Path, r: random.Random) -> None:
    """The second sentence keeps k of the first's 4 content words; the score is 1.25 k."""
    d.mkdir(parents=True)
    head = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
    vocab = POS + NEG + COLORS + CITIES
    for split, n in (("train", 200), ("dev", 60)):
        rows = [head]
        for i in range(n):
            words = r.sample(vocab, 8)
            k = r.randint(0, 4)
            first, second = words[:4], words[:k] + words[4:8 - k]
            rows.append(f"{i}\tmain-news\tx\t2012\t{i}\tnone\tnone\tthe {' '.join(first)} .\t"
                        f"a {' '.join(second)} .\t{1.25 * k:.3f}")
        (d / f"{split}.tsv").write_text("\n".join(rows) + "\n")


def write_conll(d: Path, r: random.Random) -> None:
    """IOB1 as CoNLL-2003; eng.testa (dev) is eng.train itself, so a lookup tagger is perfect on it."""
    d.mkdir(parents=True)
    lines = ["-DOCSTART- -X- O O", ""]
    for _ in range(80):
        if r.random() < 0.2:  # two adjacent people: the second starts with B-PER
            toks = [(r.choice(PEOPLE), "I-PER"), (r.choice(PEOPLE), "B-PER"), (r.choice(VERBS), "O")]
        else:
            toks = [(r.choice(PEOPLE), "I-PER"), (r.choice(VERBS), "O"), ("to", "O"), (r.choice(CITIES), "I-LOC")]
        lines += [f"{w} NN I-NP {t}" for w, t in toks + [(".", "O")]] + [""]
    for name in ("eng.train", "eng.testa"):
        (d / name).write_text("\n".join(lines))


def test_classification_beats_majority(tmp_path):
    write_sst(tmp_path / "SST-2", random.Random(0))
    scores = baselines.baseline_scores("sst-2", tmp_path / "SST-2")
    assert (scores["train_examples"], scores["dev_examples"], scores["metric"]) == (400, 60, "accuracy")
    assert scores["language"] == "en"
    b = {k: v["value"] for k, v in scores["baselines"].items()}
    assert set(b) == {"majority", "naive_bayes", "tfidf_lr"}
    assert 40 <= b["majority"] < 80  # the positive share of dev
    assert b["naive_bayes"] >= 90 and b["tfidf_lr"] >= 90  # one word decides the label
    assert all(v["fit_s"] >= 0 for v in scores["baselines"].values())


def test_pair_overlap_is_learnable(tmp_path):
    write_rte(tmp_path / "RTE", random.Random(1))
    b = {k: v["value"] for k, v in baselines.baseline_scores("rte", tmp_path / "RTE")["baselines"].items()}
    assert b["naive_bayes"] >= max(b["majority"], 80) and b["tfidf_lr"] >= max(b["majority"], 80)


def test_chinese_uses_characters(tmp_path):
    write_chnsenticorp(tmp_path / "ChnSentiCorp", random.Random(2))
    scores = baselines.baseline_scores("chnsenticorp", tmp_path / "ChnSentiCorp")
    assert scores["language"] == "zh"
    assert baselines.units("好棒 ok", True) == ["好", "棒", "o", "k"]
    assert baselines.ngrams("酒店好", True) == ["酒", "店", "好", "酒 店", "店 好"]
    b = {k: v["value"] for k, v in scores["baselines"].items()}
    assert b["naive_bayes"] >= 90 and b["tfidf_lr"] >= 90 and b["tfidf_lr"] >= b["majority"]


def test_regression_correlates_and_constant_has_no_score(tmp_path):
    write_stsb(tmp_path / "STS-B", random.Random(3))
    scores = baselines.baseline_scores("sts-b", tmp_path / "STS-B")
    b = scores["baselines"]
    assert scores["metric"] == "pearson"
    assert b["mean"]["value"] is None and "constant" in b["mean"]["note"]
    assert b["tfidf_cosine"]["value"] > 80 and b["ridge"]["value"] > 80
    assert set(b["ridge"]["metrics"]) == {"pearson", "spearman"}


def test_lookup_tagger_is_perfect_on_its_training_set(tmp_path):
    write_conll(tmp_path / "CoNLL-2003", random.Random(4))
    b = baselines.baseline_scores("conll2003", tmp_path / "CoNLL-2003")["baselines"]
    assert b["lookup"]["value"] == 100.0
    assert b["all_o"]["value"] == 0.0
    # joining runs of one type merges the two adjacent people into one entity: below 100, above 0
    assert 0 < b["type_lookup"]["value"] < 100
    assert b["lookup"]["metrics"]["entities"] == b["all_o"]["metrics"]["entities"] > 0  # a count, not x100
    assert baselines.join_runs(["PER", "PER", "O", "LOC", "PER"]) == ["B-PER", "I-PER", "O", "B-LOC", "B-PER"]


def test_main_writes_json_and_markdown(bench, tmp_path, capsys):
    data = tmp_path / "data"
    write_sst(data / "SST-2", random.Random(5))
    write_stsb(data / "STS-B", random.Random(6))
    (data / "QNLI").mkdir()
    (data / "QNLI" / "dev.tsv").write_text("index\tquestion\tsentence\tlabel\n0\twhat ?\tthis .\tentailment\n")
    assert bench.default_tasks(data) == ["sst-2", "sts-b", "qnli"]
    out = tmp_path / "baselines.json"
    assert bench.main(["--data", str(data), "--out", str(out), "--markdown"]) == 0
    table = capsys.readouterr().out
    assert table.startswith("| task | train / dev | metric | baseline | dev score | also | fit s |")
    assert "| sts-b | 200 / 60 | pearson | mean | — (constant) |  |" in table and "| spearman " in table and "\n- skipped qnli: " in table

    def no_nan(name):
        raise AssertionError(f"{name} in the JSON")

    envelope = json.loads(out.read_text(), parse_constant=no_nan)
    assert {"date", "command", "machine", "wall_s", "json", "targets", "results"} == set(envelope)
    result = envelope["results"]
    assert {"scikit_learn", "data", "split", "baselines", "tasks", "skipped"} <= set(result)
    assert envelope["command"].startswith("python -m benchmarks.baselines --data ")
    assert [t["task"] for t in result["tasks"]] == ["sst-2", "sts-b"]
    assert [t["folder"] for t in result["tasks"]] == ["SST-2", "STS-B"]
    [skipped] = result["skipped"]
    assert skipped["task"] == "qnli" and "no train file" in skipped["reason"]
    assert str(data) not in out.read_text() and result["data"] == "DATA"  # the user's folder is written as DATA
    assert envelope["command"].startswith("python -m benchmarks.baselines --data DATA ")
    assert skipped["reason"].startswith("DATA/QNLI: ")
    for task in result["tasks"]:
        assert set(task["baselines"]) <= set(result["baselines"])  # every baseline is described
