"""report.md rendered from stored results.json files: the renderer's output is pinned byte for byte.

tests/fixtures/report/full is the committed 100-minute report (docs/report), quick a `--quick`-style
run of the tiny study with SST-2 fine-tuning and an --hf-checkpoint curve; each report.md is what the
renderer wrote for its results.json when the fixture was made."""

from pathlib import Path

import pytest

from albertlm.analysis.report_md import render
from albertlm.analysis.results import from_json

FIXTURES = Path(__file__).parent / "fixtures" / "report"


@pytest.mark.parametrize("name", ["full", "quick"])
def test_render_matches_the_golden_report(name):
    assert render(from_json(FIXTURES / name / "results.json")) == (FIXTURES / name / "report.md").read_text()
