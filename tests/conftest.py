"""Shared fixtures: the real traces in ../shared/traces and loading helpers.

Tests that need ../shared/traces skip with a reason when it is absent, and
fail instead when TRACEKIT_REQUIRE_SHARED=1 (CI sets it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "traces"

# Every trace in ../shared/traces (see its README); a test checks the list is complete.
SHARED_TRACES = [
    "hta/a100_event_sync_multi_stream.json.gz",
    "hta/a100_nccl_rank0.json.gz",
    "hta/a100_triton_example.json.gz",
    "hta/cpu_only_rank34.json.gz",
    "hta/legacy_runtime_kernel_cats.json.gz",
    "hta/mi250_minitoy_train.json.gz",
    "hta/v100_ns_resolution.json.gz",
    "kineto/v100_resnet50_2021_legacy.json.gz",
    "tracelens/b200_vllm_eager_paged-fp8.json.gz",
    "tracelens/h100_bert-small_sdpa-flash.json.gz",
    "tracelens/mi210_gpu_only.json.gz",
    "tracelens/mi300_bert-small_sdpa-flash.json.gz",
    "tracelens/mi300_falconsai_vit_sdpa_modules.json.gz",
    "tracelens/mi300_sglang_qwen3-8b_capture_modules.json.gz",
    "tracelens/mi300_sglang_qwen3-8b_decode_hipgraph.json.gz",
    "tracelens/mi300_xdit_flux1_aiter-sage_t5-clip-eager.json.gz",
    "tracelens/normalization_gpu_user_annotation.json.gz",
    "tracelens/torch_compile_triton.json.gz",
]


def require_shared() -> Path:
    """The shared traces folder, or skip (fail under TRACEKIT_REQUIRE_SHARED=1)."""
    if SHARED.is_dir():
        return SHARED
    reason = f"{SHARED} is absent: real GPU traces recorded by other projects are not available"
    if os.environ.get("TRACEKIT_REQUIRE_SHARED") == "1":
        pytest.fail(reason + " (TRACEKIT_REQUIRE_SHARED=1)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    return require_shared()


@pytest.fixture(scope="session")
def load_shared(shared_dir):
    """Load a shared trace once per session: ``load_shared("hta/x.json.gz")``."""
    import tracekit

    cache: dict[str, object] = {}

    def get(rel: str):
        if rel not in cache:
            cache[rel] = tracekit.load(shared_dir / rel)
        return cache[rel]

    yield get
    for trace in cache.values():
        trace.close()


VARIANTS = ("naive", "inplace", "math", "efficient", "flash", "cudnn")


def load_post_variants(directory: Path, legacy: bool = False) -> dict:
    """The post's six attention variants as synthetic traces, loaded: {name: (Trace, Variant)}."""
    from synthetic import post_variants

    import tracekit

    out = {}
    for name, variant in post_variants(legacy=legacy).items():
        path = directory / f"{name}.json.gz"
        variant.write(path)
        out[name] = (tracekit.load(path), variant)
    return out


@pytest.fixture(scope="session")
def post_traces(tmp_path_factory):
    """The post's variants (modern categories), loaded once per session."""
    out = load_post_variants(tmp_path_factory.mktemp("post"))
    yield out
    for trace, _ in out.values():
        trace.close()


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Keep each test session's trace cache out of the user's home."""
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture
def clean_env(monkeypatch):
    """monkeypatch with every launcher variable (rank, world size, local rank, job id) unset."""
    from capture import cluster

    for name in cluster.RANK_VARS + cluster.WORLD_SIZE_VARS + cluster.LOCAL_RANK_VARS + cluster.JOB_ID_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def tiny_attention_args(impl: str, out: Path, *more: str, head_dim: int = 8, steps: bool = True) -> list[str]:
    """``capture attention`` arguments for a 1x2x32xHEAD_DIM attention on CPU, one warm-up and one recorded step
    (no step options when ``steps`` is false), then ``more``."""
    shape = ["--batch", "1", "--heads", "2", "--seq", "32", "--head-dim", str(head_dim)]
    counts = ["--warmup", "1", "--steps", "1"] if steps else []
    return ["attention", "--impl", impl, "--device", "cpu", *shape, *counts, "--out", str(out), *more]


def capture_tiny_attention(impl: str, out: Path, tag: str):
    """One warm-up and one recorded step of a 1x2x32x8 attention on CPU in float32 (needs torch)."""
    import capture

    return capture.run_attention(
        impl,
        out=out,
        tag=tag,
        device="cpu",
        dtype="float32",
        warmup=1,
        steps=1,
        shape=capture.AttentionShape(1, 2, 32, 8),
    )


@pytest.fixture(autouse=True, scope="session")
def _check_sql_modules():
    """Every build in the tests checks each SQL module's header against what the module did."""
    from tracekit.common import sqlmodules

    sqlmodules.CHECK = True
    yield
    sqlmodules.CHECK = False
