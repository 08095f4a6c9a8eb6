"""benchmarks/ and experiments/ as packages: every script a module with --help, none patching
sys.path, every results file in one envelope, the committed results index up to date, and every
script or results path the docs name present."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

from benchmarks import harness, index

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("benchmarks", "experiments")
LIBRARIES = {"benchmarks.harness", "benchmarks.start_models"}  # imported by the scripts, not run
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def scripts() -> list[str]:
    return [f"{pkg}.{p.stem}" for pkg in PACKAGES for p in sorted((REPO / pkg).glob("*.py"))
            if p.stem != "__init__" and f"{pkg}.{p.stem}" not in LIBRARIES]


def test_no_script_patches_sys_path():
    """They are packages, run with python -m from the root: none reaches a sibling through sys.path."""
    offenders = [f"{p.relative_to(REPO)}:{n}" for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*"))
                 if p.suffix in (".py", ".sh")
                 for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
                 if re.search(r"sys\.path\.(insert|append)|sys\.path\s*[+=]", line)]
    offenders += [f"{d.relative_to(REPO)}:{n}" for d in DOCS
                  for n, line in enumerate(d.read_text(encoding="utf-8").splitlines(), 1) if "sys.path" in line]
    assert offenders == []


@pytest.mark.parametrize("module", scripts())
def test_every_script_is_a_module_with_help(module, capsys):
    if module == "benchmarks.serve_baseline_app":
        pytest.importorskip("fastapi")
    if module == "benchmarks.bench_serve":
        pytest.importorskip("httpx")
    script = importlib.import_module(module)
    with pytest.raises(SystemExit) as stop:
        script.main(["--help"])
    assert stop.value.code == 0 and "usage:" in capsys.readouterr().out


def test_the_envelope_carries_command_machine_and_verdicts(tmp_path):
    target = harness.Target("speed-up", 2.5, 2.0)
    result = harness.envelope("benchmarks.bench_speed", ["--quick", "a b"], {"rows": [1]}, [target], started=0.0)
    assert list(result) == list(harness.ENVELOPE)
    assert result["command"] == "python -m benchmarks.bench_speed --quick 'a b'"
    assert result["targets"] == [target.as_dict()] and result["targets"][0]["met"] is True
    assert {"cpu", "cores", "torch", "gpu"} <= set(result["machine"]) and result["results"] == {"rows": [1]}
    out = tmp_path / "deep" / "r.json"
    shown = harness.publish(result, out, render=lambda r: f"table of {r['json']}", markdown=tmp_path / "m.md")
    assert shown == f"table of {out.resolve()}" and json.loads(out.read_text())["json"] == str(out.resolve())
    assert (tmp_path / "m.md").read_text().endswith(f"\n\ntable of {out.resolve()}")
    assert harness.read_result(out) == json.loads(out.read_text())


def test_a_results_file_from_before_the_envelope_reads_in_its_shape(tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"date": "2026-11-29", "command": "python benchmarks/bench_data.py --workers 2",
                               "builds": {"1x": 1}, "per_worker_fraction_of_raw": 0.29}))
    result = harness.read_result(old)
    assert list(result) == list(harness.ENVELOPE) and result["targets"] == []
    assert result["results"] == {"builds": {"1x": 1}, "per_worker_fraction_of_raw": 0.29}
    assert index.current_command(result["command"]) == "python -m benchmarks.bench_data --workers 2"


def test_recorded_commands_read_as_they_run_today():
    assert index.current_command("benchmarks/finetune_real.py --threads 1") == "python -m experiments.finetune_real --threads 1"
    assert (index.current_command("python -m benchmarks.transfer_diagnostics --model M")
            == "python -m experiments.transfer_diagnostics --model M")
    assert index.current_command("albertlm pretrain") == "albertlm pretrain"


def test_latency_rounds_alternate_variants_round_by_round():
    calls = []
    runs = {"a": "A", "b": "B"}
    times = harness.latency_rounds(runs, {"one": calls.append}, rounds=2)
    assert calls == ["A", "B"] * 3  # the warm-up round, then 2 timed rounds in alternation
    assert [len(times[v]["one"]) for v in runs] == [2, 2]
    assert set(harness.time_rounds(runs, {"one": calls.append}, 1)["a"]) == {"one"}


def test_the_results_index_is_up_to_date():
    """benchmarks/results/INDEX.md is what `python -m benchmarks.index` writes from the results and the docs."""
    assert index.INDEX.read_text(encoding="utf-8") == index.render(), "run python -m benchmarks.index"


def test_the_index_lists_every_results_file_and_links_sections_that_exist():
    text = index.INDEX.read_text(encoding="utf-8")
    for path in index.results_files():
        assert f"[{path.relative_to(index.RESULTS)}]" in text
    anchors = {(s.doc, s.anchor) for doc in (REPO / "docs").glob("*.md") for s in index.sections(doc)}
    for doc, tag in re.findall(r"\]\(\.\./\.\./(docs/[\w-]+\.md)#([^)]+)\)", text):
        assert (doc, tag) in anchors, (doc, tag)


def test_every_script_and_results_path_the_docs_name_exists():
    missing = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for module in re.findall(r"python3? -m ((?:benchmarks|experiments)\.\w+)", text):
            if not module.split(".")[1].isupper() and not (REPO / (module.replace(".", "/") + ".py")).is_file():
                missing.append(f"{doc.name}: {module}")
        for path in re.findall(r"(?<![\w/])((?:benchmarks|experiments)/[\w./-]*\w)", text):
            if not (REPO / path).exists() and not re.search(r"<|\*", path):
                missing.append(f"{doc.name}: {path}")
    assert missing == []


def test_every_section_link_in_the_docs_resolves():
    """Links to a heading (`(file.md#anchor)`, `(#anchor)`) point at a heading that exists, GitHub's way."""
    anchors = {}
    broken = []
    for doc in DOCS:
        for target, tag in re.findall(r"\]\(([\w./-]*\.md|)#([\w-]+)\)", doc.read_text(encoding="utf-8")):
            path = (doc.parent / target).resolve() if target else doc
            if path not in anchors:
                anchors[path] = {s.anchor for s in index.sections(path)} if path.is_file() else set()
            if tag not in anchors[path]:
                broken.append(f"{doc.name}: {target}#{tag}")
    assert broken == []


def test_each_benchmark_target_has_its_verdict_in_one_section():
    """docs/benchmarks.md says "met" / "not met" only under "Targets: one verdict each"; the dated
    sections record what each run measured and link there."""
    verdict = re.compile(r"\*\*(?:not )?met\b|\bnot met\b|: met\b|\bunmet\b")
    sections = index.sections(REPO / "docs" / "benchmarks.md")
    inside = {"Targets: one verdict each"} | {s.title for s in sections if s.title.startswith("Target: ")}
    assert len(inside) > 5
    stray = [s.title for s in sections if s.title not in inside and verdict.search(s.text)]
    assert stray == []
