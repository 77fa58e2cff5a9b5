"""tracekit capture: record labelled PyTorch profiler traces of attention.

Needs only torch and the standard library, and imports torch at first use, so this
package imports (and ``python -m capture --help`` works) where torch is missing.
Importable as ``capture`` from the repository root and as ``tracekit.capture`` once
installed; hence relative imports only. The label scheme is in ``README.md`` here.
"""

from .attention import IMPLS, AttentionShape, Outcome, run_attention, run_experiment
from .cluster import ClusterInfo, detect_cluster, output_path, parse_ranks, should_record, trace_path
from .errors import CaptureError, MissingDependencyError, UnavailableError
from .labels import (
    DEFAULT_PATTERNS,
    LABEL_SCHEME,
    STAGES,
    LabelHandle,
    attention_call,
    label_modules,
    stage,
)
from .model import load_hf_model, profile_model, run_hf_model
from .session import (
    CAPTURE_VERSION,
    DEFAULT_SCHEDULE,
    METADATA_KEY,
    CaptureResult,
    Recording,
    RegionStats,
    Schedule,
    capture,
    capture_metadata,
    profiling,
    run_steps,
)

__version__ = CAPTURE_VERSION

__all__ = [
    "CAPTURE_VERSION",
    "DEFAULT_PATTERNS",
    "DEFAULT_SCHEDULE",
    "IMPLS",
    "LABEL_SCHEME",
    "METADATA_KEY",
    "STAGES",
    "AttentionShape",
    "CaptureError",
    "CaptureResult",
    "ClusterInfo",
    "LabelHandle",
    "MissingDependencyError",
    "Outcome",
    "Recording",
    "RegionStats",
    "Schedule",
    "UnavailableError",
    "attention_call",
    "capture",
    "capture_metadata",
    "detect_cluster",
    "label_modules",
    "load_hf_model",
    "output_path",
    "parse_ranks",
    "profile_model",
    "profiling",
    "run_attention",
    "run_experiment",
    "run_hf_model",
    "run_steps",
    "should_record",
    "stage",
    "trace_path",
]
