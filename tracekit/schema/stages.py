"""The attention-stage vocabulary, declared once in ``capture/stages.csv``.

The capture module's labels (``stage:<name>``), the attribution (which stages
are the attention core, which count as kernel-level time), the report's
colours and the docs all read that one file. It lives with the capture module,
which needs only the standard library to read it, and installs as package data
of ``tracekit.capture``; finding it here does not import the capture module.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tracekit.common import resources


@dataclass(frozen=True)
class Stage:
    """One attention stage."""

    name: str
    order: int
    core: bool  # part of the attention core (between the projections)
    kernel_level: bool  # its kernels count in an attention call's kernel-level time
    colour: str  # #rrggbb, in every plot: Okabe-Ito hues for the core stages, Tol-style hues for the rest; the stages one model shows together stay apart under protan-, deutan- and tritanopia (tests/test_stage_colours.py)
    doc: str


def csv_path() -> Path:
    """Where the vocabulary file is (beside the capture module, installed or not)."""
    return resources.file_beside("tracekit.capture", "stages.csv")


@cache
def all_stages() -> tuple[Stage, ...]:
    """Every stage, in pipeline order (``other`` last)."""
    with open(csv_path(), newline="", encoding="utf-8") as fh:
        rows = [
            Stage(r["stage"], int(r["order"]), r["core"] == "yes", r["kernel_level"] == "yes", r["colour"], r["doc"])
            for r in csv.DictReader(fh)
        ]
    return tuple(sorted(rows, key=lambda s: s.order))


def names() -> tuple[str, ...]:
    """Stage names in order."""
    return tuple(s.name for s in all_stages())


def core() -> tuple[str, ...]:
    """The attention core: between the projections (QK^T ... PV, or one fused kernel)."""
    return tuple(s.name for s in all_stages() if s.core)


def kernel_level() -> tuple[str, ...]:
    """Stages whose kernels count as attention kernels (kernel-level time)."""
    return tuple(s.name for s in all_stages() if s.kernel_level)


def colours() -> dict[str, str]:
    """Stage -> plot colour."""
    return {s.name: s.colour for s in all_stages()}
