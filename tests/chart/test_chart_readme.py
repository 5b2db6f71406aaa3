"""The chart's README: its values table is generated from values.yaml and cannot drift; the
NOTES' kubectl commands name the namespace; `make image` is documented and defined."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "redlease"
sys.path.insert(0, str(ROOT / "charts"))
import values_table  # noqa: E402 - the generator, a script next to the chart


def test_values_table_is_current_and_complete() -> None:
    check = subprocess.run(
        [sys.executable, str(ROOT / "charts" / "values_table.py"), "--check"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert check.returncode == 0, check.stderr
    rows = [r for r in (CHART / "README.md").read_text().splitlines() if r.startswith("| `")]
    assert len(rows) > 50
    assert [r for r in rows if r.endswith("|  |")] == [], "values.yaml keys without a # -- text"


def test_a_changed_value_makes_the_check_fail() -> None:
    readme = (CHART / "README.md").read_text()
    values = (CHART / "values.yaml").read_text()
    assert values_table.render(readme, values) == readme
    changed = values.replace("replicaCount: 2", "replicaCount: 3")
    assert changed != values and values_table.render(readme, changed) != readme
    documented = values.replace("# -- Debug logging.", "# -- Verbose logs.")
    assert values_table.render(readme, documented) != readme


def test_chart_yaml_cites_an_existing_readme_and_notes_name_the_namespace() -> None:
    assert "README in this chart" in (CHART / "Chart.yaml").read_text()
    assert (CHART / "README.md").is_file()
    notes = (CHART / "templates" / "NOTES.txt").read_text()
    commands = [line for line in notes.splitlines() if re.search(r"kubectl (get|annotate)", line)]
    assert commands and all(" -n " in line for line in commands), commands


def test_make_image_is_defined_and_documented() -> None:
    dry = subprocess.run(["make", "-n", "image"], cwd=ROOT, capture_output=True, text=True)
    assert dry.returncode == 0 and "docker build -t ghcr.io/redlease/redlease:" in dry.stdout
    assert "make image" in (CHART / "README.md").read_text()
    assert "make image" in (ROOT / "README.md").read_text()
