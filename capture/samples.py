"""The repository's sample traces: the reference variants that run on a CPU, small shapes.

``python -m capture samples`` rewrites ``sample_traces/cpu_attention/`` with one
``{impl}.json.gz`` per variant, its key_averages files, and ``manifest.json``, which
holds only fields that do not depend on the machine or the time of recording.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .attention import AttentionShape, Outcome, run_experiment
from .cluster import atomic_write
from .errors import require
from .labels import LABEL_SCHEME
from .session import CAPTURE_VERSION, DEFAULT_SCHEDULE

SAMPLE_DIR = Path("sample_traces") / "cpu_attention"
SAMPLE_IMPLS = ("naive", "inplace", "math", "efficient", "flash", "cudnn", "auto")
SAMPLE_SHAPE = AttentionShape(batch=2, heads=4, seq=128, head_dim=32)
SAMPLE_TAG = "cpu_attention"


def record_samples(out: str | Path = SAMPLE_DIR) -> tuple[Path, list[Outcome]]:
    """Record the CPU sample traces into `out` and write its ``manifest.json``.

    Variants torch refuses on CPU are listed under ``unavailable`` in the manifest.
    Returns the manifest path and the outcomes.
    """
    torch = require("torch")
    out = Path(out)
    options: dict[str, Any] = dict(
        out=out,
        shape=SAMPLE_SHAPE,
        dtype="float32",
        causal=True,
        device="cpu",
        tag=SAMPLE_TAG,
        flat=True,
        record_shapes=True,
        with_stack=False,
    )
    outcomes = run_experiment(list(SAMPLE_IMPLS), **options)
    traces = []
    for outcome in outcomes:
        if outcome.result is None:
            continue
        result = outcome.result
        traces.append(
            {
                "file": result.trace.name,
                "impl": outcome.impl,
                "key_averages_txt": result.key_averages_txt.name,
                "key_averages_json": result.key_averages_json.name,
            }
        )
    manifest = {
        "description": "Attention forward on CPU, one trace per implementation (regenerate: python -m capture samples)",
        "label_scheme": LABEL_SCHEME,
        "capture_version": CAPTURE_VERSION,
        "torch_version": torch.__version__,
        "device": "cpu",
        "dtype": "float32",
        "causal": True,
        "shapes": SAMPLE_SHAPE.as_metadata(),
        "schedule": DEFAULT_SCHEDULE.as_dict(),
        "warmup_calls": 3,
        "record_shapes": True,
        "with_stack": False,
        "profile_memory": False,
        "traces": traces,
        "unavailable": [{"impl": o.impl, "reason": o.unavailable} for o in outcomes if o.unavailable],
    }
    path = atomic_write(
        out / "manifest.json",
        lambda fh: fh.write((json.dumps(manifest, indent=2) + "\n").encode()),
    )
    return path, outcomes
