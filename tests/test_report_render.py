"""report.md rendered from stored results.json files: the renderer's output is pinned byte for byte.

tests/fixtures/report/full is the committed 100-minute report (docs/report), quick a `--quick`-style
run of the tiny study with SST-2 fine-tuning and an --hf-checkpoint curve; each report.md is what the
renderer wrote for its results.json when the fixture was made."""

import copy
import dataclasses
import json
import math
from pathlib import Path

import pytest

from albertlm.analysis.report_md import _blocks, objectives_observed, render
from albertlm.analysis.results import PeakRss, from_json, to_json
from albertlm.cli import main
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

    assert "speed.training[2].seconds: must be a finite number > 0, got 'fast'" in _broken(tmp_path, wrong)

    def unknown(data):
        data["environment"]["cpu_modle"] = "typo"

    assert "environment.cpu_modle: unknown field in Environment" in _broken(tmp_path, unknown)

    def bad_setting(data):
        data["settings"]["downstream"] = "maybe"

    assert "settings.downstream: must be 'auto' or 'on' or 'off'" in _broken(tmp_path, bad_setting)


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
    (tmp_path / "results.json").write_text((FIXTURES / "quick" / "results.json").read_text())
    (tmp_path / "report.md").write_text("stale")
    assert main(["report", "--render", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "report.md").read_text() == (FIXTURES / "quick" / "report.md").read_text()
    assert main(["report", "--render", "--out", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert "results.json: cannot read results" in err and len(err.strip().splitlines()) == 1


# ---------------------------------------------------------------------------- numbers and shapes refused
@pytest.fixture(scope="module")
def full_results():
    return json.loads((FIXTURES / "full" / "results.json").read_text())


def _render_refuses(tmp_path, capsys, data, edit):
    """`report --render` of the full report's results.json changed by `edit`: exit 2, one line naming
    results.json, and the user's report.md as it was. Returns the line."""
    data = copy.deepcopy(data)
    edit(data)
    (tmp_path / "results.json").write_text(json.dumps(data))  # NaN and Infinity as json.dumps writes them
    (tmp_path / "report.md").write_text("my edit\n")
    assert main(["report", "--render", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{tmp_path / 'results.json'}: " in err
    assert (tmp_path / "report.md").read_text() == "my edit\n"
    return err


def _variant(key, value, name="e64-all"):
    return lambda r: r["study"]["variants"][name].__setitem__(key, value)


@pytest.mark.parametrize("value, shown", [(math.nan, "nan"), (math.inf, "inf"), (1e308, "1e+308"), (-0.1, "-0.1")])
def test_a_score_that_is_not_a_finite_fraction_is_refused(tmp_path, capsys, full_results, value, shown):
    err = _render_refuses(tmp_path, capsys, full_results, _variant("mask_accuracy_mean", value))
    assert err.endswith(f"study.variants['e64-all'].mask_accuracy_mean: must be a finite number in [0, 1], got {shown}")


@pytest.mark.parametrize("edit, message", [
    (_variant("mask_accuracy", []), "study.variants['e64-all'].mask_accuracy: must be one value per seed (2: [0, 1]), "
                                    "got []"),
    (_variant("mask_loss", [5.6]), "study.variants['e64-all'].mask_loss: must be one value per seed (2: [0, 1]), "
                                   "got [5.6]"),
    (lambda r: r["study"].__setitem__("seeds", []), "study.seeds: must be 2 seeds (settings.seeds), got []"),
    (lambda r: r["study"].__setitem__("variants", {}), "study.variants: must be a non-empty object, got {}"),
    (lambda r: r["study"].__setitem__("runs", {}), "study.runs: must be a non-empty object, got {}"),
    (lambda r: r["study"]["table5"]["sop"].__setitem__("per_seed", []),
     "study.table5['sop'].per_seed: must be a non-empty list, got []"),
    (lambda r: r["study"]["table5"]["sop"]["per_seed"][1].__setitem__("seed", 0),
     "study.table5['sop'].per_seed: must be one model per seed [0, 1], got the seeds [0, 0]"),
], ids=["mask-accuracy-empty", "mask-loss-short", "seeds-empty", "variants-empty", "runs-empty", "table5-no-seeds",
                                   "table5-seed-twice"])
def test_empty_or_short_per_seed_entries_are_refused(tmp_path, capsys, full_results, edit, message):
    assert _render_refuses(tmp_path, capsys, full_results, edit).endswith(message)


def test_no_total_time_or_a_null_budget_is_refused(tmp_path, capsys, full_results):
    """The producer always writes timings' total and the budget it ran with (never None)."""
    err = _render_refuses(tmp_path, capsys, full_results, lambda r: r.__setitem__("timings", {}))
    assert err.endswith("results.json: timings['total']: missing entry")
    err = _render_refuses(tmp_path, capsys, full_results, lambda r: r["settings"].__setitem__("budget_minutes", None))
    assert err.endswith("results.json: settings.budget_minutes: must be a finite number > 0, got None")
    err = _render_refuses(tmp_path, capsys, full_results, lambda r: r["settings"].pop("budget_minutes"))
    assert err.endswith("results.json: settings.budget_minutes: missing field of ReportSettings")


def _set(*path_and_value):
    *path, key, value = path_and_value

    def edit(r):
        for p in path:
            r = r[p]
        r[key] = value
    return edit


RUN, CURVE = "e64-all-s0", "all-shared (ALBERT)"


@pytest.mark.parametrize("edit, message", [
    (_set("study", "runs", RUN, "summary", "eval", "examples", "many"),
     f"study.runs['{RUN}'].summary.eval.examples: must be a finite number >= 0, got 'many'"),
    (_set("study", "plan", "steps", 1.5), "study.plan.steps: must be an integer >= 1, got 1.5"),
    (_set("params", 0, "backbone", 10**30), "params[0].backbone: must be an integer >= 1 (at most 2**53 in "
                                            "magnitude), got 1000000000000000000000000000000"),
    (_set("timings", "total", -1), "timings['total']: must be a finite number >= 0, got -1"),
    (_set("environment", "load_average", {"1": 2}), "environment.load_average: must be a list, got {'1': 2}"),
    (_set("study", "builds", "sop", "splits", {}), "study.builds['sop'].splits['train']: missing entry"),
    (lambda r: r["study"]["table5"].pop("nsp"), "study.table5['nsp']: missing entry (needs 'sop', 'nsp', 'none')"),
    (_set("params", 0, "sharing", "some"), "params[0].sharing: must be 'all' or 'attention' or 'ffn' or 'none', "
                                           "got 'some'"),
    (_set("study", "settings", "embedding_sizes", []), "study.settings.embedding_sizes: must be a non-empty list, "
                                                       "got []"),
    (_set("study", "settings", "lr", 0), "study.settings.lr: must be a finite number > 0, got 0"),
    (_set("study", "runs", RUN, "recipe", "lr", math.nan), f"study.runs['{RUN}'].recipe.lr: must be a finite "
                                                           "number, got nan"),
    (_set("study", "runs", RUN, "recipe", "max_seq_length", "64"),
     f"study.runs['{RUN}'].recipe.max_seq_length: must be an integer, got '64'"),
    (_set("study", "smoothness", CURVE, "angle", [1.0]), f"study.smoothness['{CURVE}'].angle: must be one value "
                                                        "per layer (4), got [1.0]"),
    (_variant("mask_accuracy_mean", 0.5), "study.variants['e64-all'].mask_accuracy_mean: must be the mean of "
                                          "mask_accuracy (0.0995787), got 0.5"),
    (_variant("seeds", [0, 2]), "study.variants['e64-all'].seeds: must be the study's seeds [0, 1], got [0, 2]"),
    (lambda r: r["study"]["variants"].pop("e64-all"), f"study.runs['{RUN}'].variant.name: must be one of the "
                                                      "variants, got 'e64-all'"),
    (_set("speed", "inference", 0, "rss", "peak_kib", 1), "speed.inference[0].rss.peak_kib: must be at least "
                                                          "rss_built_kib (278812), got 1"),
    (_set("study", "settings", "curriculum_seq_length", None), "study.plan.curriculum_steps: must be 0 when "
                                                              "settings.curriculum_seq_length is null, got 500"),
    (_set("environment", "two\nlines", 1), "environment['two\\nlines']: unknown field in Environment"),
], ids=["string-for-number", "float-for-int", "huge-int", "negative-time", "object-for-list", "no-train-split",
        "table5-objective", "unknown-sharing", "no-embedding-sizes", "zero-lr", "recipe-nan", "recipe-string",
        "curve-length", "mean-disagrees", "variant-seeds", "variant-dropped", "peak-below-built",
        "curriculum-without-length", "unknown-key-with-a-newline"])
def test_a_field_of_the_wrong_shape_or_range_is_one_line(tmp_path, full_results, edit, message):
    data = copy.deepcopy(full_results)
    edit(data)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    with pytest.raises(AlbertlmError) as exc:
        from_json(path)
    assert str(exc.value) == f"{path}: {message}"


def test_a_number_json_cannot_hold_is_one_line(tmp_path):
    path = tmp_path / "results.json"
    path.write_text('{"settings": ' + "9" * 5000 + "}")
    with pytest.raises(AlbertlmError, match="results.json: cannot read results: Exceeds the limit"):
        from_json(path)


def test_inference_memory_measured_in_part_renders_blank():
    """peak_kib without rss_built_kib (each may be missing from /proc): not measured, as when both are."""
    report = from_json(FIXTURES / "full" / "results.json")
    first = report.speed.inference[0]
    part = dataclasses.replace(first, rss=PeakRss(rss_built_kib=None, peak_kib=301348, peak_reset=True))
    none = dataclasses.replace(first, rss=None)

    def row(x):
        speed = dataclasses.replace(report.speed, inference=[x, *report.speed.inference[1:]])
        text = render(dataclasses.replace(report, speed=speed))
        return next(line for line in text.splitlines() if line.startswith(f"| {first.name} |"))
    assert row(part) == row(none)
