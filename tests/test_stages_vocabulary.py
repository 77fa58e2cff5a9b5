"""The stage vocabulary (capture/stages.csv) is the one list every part uses."""

from __future__ import annotations

import csv
from pathlib import Path

from tracekit.attribution import assign
from tracekit.present import plots
from tracekit.schema import stages
from tracekit.schema.catalog import TABLES

ROOT = Path(__file__).resolve().parent.parent

# Rule cells that are not stages: resolved by position in the call, or the pattern's group.
POSITIONAL = {"matmul", "proj", "norm", "rotate", "concat", "reduce", "\\1", ""}


def test_capture_labels_use_the_vocabulary():
    from capture import labels

    assert labels.STAGES == stages.names()
    assert stages.names()[-1] == "other"


def test_attribution_and_plots_read_the_vocabulary():
    assert set(assign.CORE_STAGES) <= set(stages.names())
    assert set(assign.KERNEL_LEVEL_STAGES) <= set(assign.CORE_STAGES)
    assert "fused_attention" in assign.CORE_STAGES and "fused_attention" not in assign.KERNEL_LEVEL_STAGES
    assert list(plots.STAGE_COLORS) == list(stages.names())
    assert all(c.startswith("#") and len(c) == 7 for c in plots.STAGE_COLORS.values())


def test_every_stage_documented_and_every_rule_stage_known():
    doc = (ROOT / "docs" / "attribution.md").read_text()
    assert all(f"`{s}`" in doc for s in stages.names())
    stage_col = next(c for c in TABLES["cpu_stages"].columns if c.name == "stage")
    assert all(s in stage_col.doc for s in stages.names())
    for path in sorted((ROOT / "tracekit" / "rules").glob("*stages.csv")):
        with open(path, newline="", encoding="utf-8") as fh:
            used = {row["stage"] for row in csv.DictReader(fh)}
        assert used - POSITIONAL <= set(stages.names()), path.name
