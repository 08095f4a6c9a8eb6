"""benchmarks.unlabelled_text on tiny task folders: the other tasks' text in source order, each line once,
the target task left out, a line equal to the target's dev text dropped, the report's counts right."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture()
def data(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    sst = root / "SST-2"
    sst.mkdir(parents=True)
    (sst / "train.tsv").write_text("sentence\tlabel\na fine film\t1\na dull film\t0\na fine film\t1\n"
                                   "Peter went to Paris .\t1\n")
    (sst / "dev.tsv").write_text("sentence\tlabel\nan sst dev phrase\t1\n")
    rte = root / "RTE"
    rte.mkdir()
    (rte / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\tthe car is red .\tit is red\tentailment\n")
    (rte / "dev.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\ta dull film\tthe sky is blue\t"
                                 "not_entailment\n")
    conll = root / "CoNLL-2003"
    conll.mkdir()
    doc = "-DOCSTART- -X- -X- O\n\n"
    (conll / "eng.train").write_text(doc + "EU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\n")
    (conll / "eng.testa").write_text(doc + "Peter NNP B-NP B-PER\nwent VBD B-VP O\nto TO B-PP O\n"
                                     "Paris NNP B-NP B-LOC\n. . O O\n\n")
    (conll / "eng.testb").write_text(doc + "Rome NNP B-NP B-LOC\n. . O O\n\n")
    return root


def test_the_other_tasks_text_once_each_without_the_targets(data: Path, tmp_path: Path, capsys) -> None:
    from benchmarks import unlabelled_text

    out, report = tmp_path / "u.txt", tmp_path / "u.json"
    assert unlabelled_text.main(["--data", str(data), "--for", "conll2003", "--out", str(out),
                                 "--report", str(report)]) == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    result = json.loads(report.read_text())["results"]
    kjv = next(s for s in result["sources"] if s["source"] == "kjv")
    assert kjv["new_lines"] > 30_000  # the built-in Bible, one verse a line
    mine = [t for t in lines if t in {"the car is red .", "it is red", "a dull film", "the sky is blue", "a fine film",
                                      "an sst dev phrase"}]
    # RTE train then dev (its dev's "a dull film" first seen there), SST-2 train only, in that order
    assert mine == ["the car is red .", "it is red", "a dull film", "the sky is blue", "a fine film"]
    assert "EU rejects" not in lines  # the target's own text
    assert "Peter went to Paris ." not in lines and result["dropped_as_target_eval"] == 1  # = a CoNLL dev sentence
    assert len(lines) == len(set(lines)) == result["lines"]
    skipped = {s["source"] for s in result["sources"] if "skipped" in s}
    assert {"sts-b", "mrpc", "qnli", "cola"} <= skipped and "DATA" in next(s["skipped"] for s in result["sources"]
                                                                          if s["source"] == "sts-b")


def test_an_unknown_target_is_a_one_line_error(data: Path, tmp_path: Path, capsys) -> None:
    from benchmarks import unlabelled_text

    with pytest.raises(SystemExit) as exc:
        unlabelled_text.main(["--data", str(data), "--for", "squad-v1.1", "--out", str(tmp_path / "u.txt")])
    assert exc.value.code == 2
    assert "--for squad-v1.1: not one of the tasks this script knows" in capsys.readouterr().err
    assert not (tmp_path / "u.txt").exists()
