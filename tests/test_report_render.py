"""report.md rendered from stored results.json files: the renderer's output is pinned byte for byte.

tests/fixtures/report/full is the committed 100-minute report (docs/report), quick a `--quick`-style
run of the tiny study with SST-2 fine-tuning and an --hf-checkpoint curve; each report.md is what the
renderer wrote for its results.json when the fixture was made."""

import json
from pathlib import Path

import pytest

from albertlm.analysis.report_md import render

FIXTURES = Path(__file__).parent / "fixtures" / "report"


@pytest.mark.parametrize("name", ["full", "quick"])
def test_render_matches_the_golden_report(name):
    results = json.loads((FIXTURES / name / "results.json").read_text())
    assert render(results) == (FIXTURES / name / "report.md").read_text()
