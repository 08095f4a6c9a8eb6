"""report.md rendered from stored results.json files: the renderer's output is pinned byte for byte.

tests/fixtures/report/full is the committed 100-minute report (docs/report), quick a `--quick`-style
run of the tiny study with SST-2 fine-tuning and an --hf-checkpoint curve; each report.md is what the
renderer wrote for its results.json when the fixture was made."""

import dataclasses
import json
from pathlib import Path

import pytest

from albertlm.analysis.report_md import _blocks, objectives_observed, render
from albertlm.analysis.results import from_json, to_json
from albertlm.errors import AlbertlmError

FIXTURES = Path(__file__).parent / "fixtures" / "report"


@pytest.mark.parametrize("name", ["full", "quick"])
def test_render_matches_the_golden_report(name):
    assert render(from_json(FIXTURES / name / "results.json")) == (FIXTURES / name / "report.md").read_text()


def test_results_json_round_trip_renders_the_same(tmp_path):
    report = from_json(FIXTURES / "quick" / "results.json")
    (tmp_path / "results.json").write_text(to_json(report))
    again = from_json(tmp_path / "results.json")
    assert again == report
    assert render(again) == render(report)
    # the file keeps today's keys and values, including the keys left out while None
    assert json.loads(to_json(report)) == json.loads((FIXTURES / "quick" / "results.json").read_text())
    full = json.loads(to_json(from_json(FIXTURES / "full" / "results.json")))
    assert all("downstream" not in run for run in full["study"]["runs"].values())


def _broken(tmp_path, edit):
    data = json.loads((FIXTURES / "full" / "results.json").read_text())
    edit(data)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    with pytest.raises(AlbertlmError) as exc:
        from_json(path)
    message = str(exc.value)
    assert "\n" not in message and message.startswith(f"{path}: ")
    return message


def test_from_json_names_the_missing_field(tmp_path):
    def drop(data):
        del data["study"]["runs"]["e64-all-s1"]["summary"]["eval"]["mask_positions"]

    message = _broken(tmp_path, drop)
    assert "study.runs['e64-all-s1'].summary.eval.mask_positions: missing field" in message


def test_from_json_names_the_wrong_or_unknown_field(tmp_path):
    def wrong(data):
        data["speed"]["training"][2]["seconds"] = "fast"

    assert "speed.training[2].seconds: expected a number, got 'fast'" in _broken(tmp_path, wrong)

    def unknown(data):
        data["environment"]["cpu_modle"] = "typo"

    assert "environment.cpu_modle: unknown field in Environment" in _broken(tmp_path, unknown)

    def bad_setting(data):
        data["settings"]["downstream"] = "maybe"

    assert "settings.downstream: expected 'auto' or 'on' or 'off'" in _broken(tmp_path, bad_setting)


def test_from_json_rejects_a_file_that_is_not_json(tmp_path):
    path = tmp_path / "results.json"
    path.write_text("{not json")
    with pytest.raises(AlbertlmError, match="results.json: cannot read results"):
        from_json(path)
    with pytest.raises(AlbertlmError, match="missing.json: cannot read results"):
        from_json(tmp_path / "missing.json")


def test_blocks_the_fixtures_do_not_reach():
    """The two template blocks neither golden report uses, filled from a fixture changed to need them."""
    report = from_json(FIXTURES / "full" / "results.json")
    study = report.study
    off = dataclasses.replace(study, variants={k: dataclasses.replace(v, mask_accuracy_mean=0.99)
                                               for k, v in study.variants.items()})
    bigram = next(iter(study.runs.values())).summary.eval.baseline_bigram_accuracy
    text = render(dataclasses.replace(report, study=off))
    assert f"Every variant ends above the context baseline ({100 * bigram:.1f}%): all left the unigram plateau." in text
    assert "**On the plateau:**" not in text
    # SOP-trained well above chance on SOP, NSP-trained at the baseline: the paper's finding holds
    t5 = dict(study.table5)
    t5["sop"] = dataclasses.replace(t5["sop"], per_seed=[dataclasses.replace(s, sop_accuracy=0.9)
                                                         for s in t5["sop"].per_seed])
    base = t5["sop"].baseline["sop"]
    t5["nsp"] = dataclasses.replace(t5["nsp"], per_seed=[dataclasses.replace(s, sop_accuracy=base)
                                                         for s in t5["nsp"].per_seed])
    observed = objectives_observed(t5)
    assert observed.endswith("The paper's finding in the SOP direction (SOP-trained above chance on SOP, "
                             "NSP-trained not) holds at this scale.")
    assert "the NSP-trained model on SOP: mean " + f"{100 * base:.1f}" in observed


def test_every_template_block_is_used_by_the_renderer():
    import inspect

    import albertlm.analysis.report_md as report_md

    source = inspect.getsource(report_md)
    assert {name for name in _blocks() if f'"{name}"' not in source} == set()


def test_cli_render_rewrites_report_md_from_results_json(tmp_path, capsys):
    from albertlm.cli import main

    (tmp_path / "results.json").write_text((FIXTURES / "quick" / "results.json").read_text())
    (tmp_path / "report.md").write_text("stale")
    assert main(["report", "--render", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "report.md").read_text() == (FIXTURES / "quick" / "report.md").read_text()
    assert main(["report", "--render", "--out", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert "results.json: cannot read results" in err and len(err.strip().splitlines()) == 1
