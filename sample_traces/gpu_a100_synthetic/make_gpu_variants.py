"""Write the post's six A100 attention variants as SYNTHESIZED Kineto traces.

These are not recordings. They are reconstructions of the traces behind Hugging Face's
"Profiling in PyTorch (Part 3): Attention is all you profile" (A100-SXM4-80GB, B=8, H=16,
S=1024, D=64, bf16, causal), built with the test suite's synthetic trace builder
(``tests/synthetic.py``) from the post's published figures: its kernel names, kernel counts
per forward, per-forward GPU times (naive in-place 1,955 µs, SDPA math 7,239 µs, efficient
277.9 µs, flash 146.8 µs, cuDNN 186.3 µs) and launch configurations. CPU-side times are the
builder's, not measurements. Every file says so in a top-level ``synthetic`` object
(``tracekit sql FILE "SELECT metadata->'synthetic' FROM traces"``).

They stand in until traces recorded on a GPU by ``python -m capture attention`` replace
them; ``make demo`` reads them. Regenerate (byte-identical; a test checks that):

    python sample_traces/gpu_a100_synthetic/make_gpu_variants.py
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tests"))

from synthetic import post_variants  # noqa: E402  (the builder lives with the tests)

MARK = {
    "synthesized": True,
    "generator": "sample_traces/gpu_a100_synthetic/make_gpu_variants.py (tests/synthetic.py)",
    "reconstructs": "Hugging Face, Profiling in PyTorch (Part 3): Attention is all you profile (A100-SXM4-80GB)",
    "note": "not a recording: kernel names, counts and GPU times follow the post's published figures",
}


def write(out: Path = HERE) -> list[Path]:
    """Write ``<variant>.json.gz`` for each variant into ``out``; return the paths."""
    paths = []
    for name in ("naive", "inplace", "math", "efficient", "flash", "cudnn"):
        meta = {"synthetic": dict(MARK, variant=name)}
        variant = post_variants([name], metadata=meta)[name]
        path = out / f"{name}.json.gz"
        variant.write(path)
        paths.append(path)
    return paths


if __name__ == "__main__":
    for p in write(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE):
        print(p)
