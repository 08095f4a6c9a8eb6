"""benchmarks/ and experiments/ as packages: every script a module with --help, none patching
sys.path, every results file in one envelope, and every script or results path the docs name present."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

from benchmarks import harness

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


def test_latency_rounds_alternate_variants_round_by_round():
    calls = []
    runs = {"a": "A", "b": "B"}
    times = harness.latency_rounds(runs, {"one": calls.append}, rounds=2)
    assert calls == ["A", "B"] * 3  # the warm-up round, then 2 timed rounds in alternation
    assert [len(times[v]["one"]) for v in runs] == [2, 2]
    assert set(harness.time_rounds(runs, {"one": calls.append}, 1)["a"]) == {"one"}


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
