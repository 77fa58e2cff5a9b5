"""Shared fixtures: the real traces in ../shared/traces, test inputs made once, loading helpers.

Tests that need ../shared/traces skip with a reason when it is absent, and
fail instead when TRACEKIT_REQUIRE_SHARED=1 (CI sets it).

Inputs are made once per session (per worker under pytest-xdist) and found by their content
(``inputs``: the same bytes give the same file, so two tests that write the same synthetic trace
share one file, one cached database and one loaded ``Trace``). Tests marked ``slow`` (exhaustive
random matrices, fuzzing) are skipped unless TRACEKIT_SLOW=1; CI (.ci/run) sets it and runs them all.
"""

from __future__ import annotations

import gzip
import hashlib
import os
from collections.abc import Mapping
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


SLOW = os.environ.get("TRACEKIT_SLOW") == "1"


def pytest_collection_modifyitems(config, items):
    """Skip the ``slow`` tests (saying how to run them) unless TRACEKIT_SLOW=1: skipped, never deselected,
    so a run of only slow tests still reports them instead of collecting nothing."""
    if SLOW:
        return
    skip = pytest.mark.skip(reason="slow (exhaustive matrix or fuzz): TRACEKIT_SLOW=1 runs it, as CI does")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def slow_unless(first: bool, *values, **kw):
    """``pytest.param(*values)`` marked ``slow`` unless ``first``: a matrix keeps its first cases in every run and
    the rest for TRACEKIT_SLOW=1 (CI)."""
    return pytest.param(*values, marks=() if first else pytest.mark.slow, **kw)


def _content(content) -> bytes:
    """The bytes of a test input: bytes as they are, text as UTF-8, a ``TraceBuilder`` or ``Variant`` as it writes."""
    if isinstance(content, bytes):
        return content
    if isinstance(content, str):
        return content.encode()
    builder = getattr(content, "builder", content)  # a synthetic.Variant holds its builder
    return builder.dumps().encode()


class Inputs:
    """Test inputs made once per session and found by their content.

    ``file(content, name)`` writes ``content`` (bytes, text, a ``TraceBuilder`` or a post ``Variant``) as
    ``name`` in a folder named by the hash of the bytes, once: the same content under the same name is the
    same path all session, so the trace cache (keyed by path, size and times) hits for every later test that
    reads it. ``folder({name: content})`` does the same for a folder of files (ranks). ``trace(*paths)`` is
    one in-memory database over those files, loaded and linked once and shared: tests that use it only
    read (no ``use_rules``, no writes), and do not close it.
    """

    def __init__(self, root: Path):
        self.root = root
        self._traces: dict[tuple[str, ...], object] = {}
        self._made: dict[tuple, Path] = {}

    def _key(self, *parts: bytes) -> str:
        h = hashlib.sha256()
        for part in parts:
            h.update(len(part).to_bytes(8, "little") + part)
        return h.hexdigest()[:20]

    def file(self, content, name: str = "trace.json") -> Path:
        """``content`` written once as ``name`` (gzip, deterministic, for a ``.gz`` name); its path."""
        data = _content(content)
        path = self.root / self._key(data, name.encode()) / name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            if name.endswith(".gz"):
                data = gzip.compress(data, mtime=0)
            part = path.with_name(path.name + ".part")
            part.write_bytes(data)
            part.replace(path)
        return path

    def folder(self, files: Mapping[str, object], name: str = "traces") -> Path:
        """A folder ``name`` holding ``{relative path: content}``, written once; its path."""
        datas = {rel: _content(c) for rel, c in sorted(files.items())}
        key = self._key(name.encode(), *(p for rel, d in datas.items() for p in (rel.encode(), d)))
        folder = self.root / key / name
        if not folder.is_dir():
            staging = self.root / key / (name + ".part")
            for rel, data in datas.items():
                target = staging / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(gzip.compress(data, mtime=0) if rel.endswith(".gz") else data)
            staging.replace(folder)
        return folder

    def made(self, key: tuple, make) -> Path:
        """``make(folder)``'s path, made once per ``key`` in a fresh folder (inputs written by other code,
        such as ``cluster_synthetic.make_job``)."""
        if key not in self._made:
            folder = self.root / "made" / self._key(repr(key).encode())
            folder.mkdir(parents=True)
            self._made[key] = make(folder)
        return self._made[key]

    def trace(self, *paths):
        """One in-memory database over ``paths`` (files or folders), loaded and linked once, shared: read only."""
        import tracekit

        key = tuple(str(Path(p).resolve()) for p in paths)
        if key not in self._traces:
            self._traces[key] = tracekit.load(list(paths)).link()
        return self._traces[key]

    def close(self) -> None:
        for trace in self._traces.values():
            trace.close()
        self._traces.clear()


@pytest.fixture(scope="session")
def inputs(tmp_path_factory):
    """The session's ``Inputs``: test inputs made once, by content (one store per xdist worker)."""
    store = Inputs(tmp_path_factory.mktemp("inputs"))
    yield store
    store.close()


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


def load_post_variants(inputs: Inputs, legacy: bool = False) -> dict:
    """The post's six attention variants as synthetic traces, each loaded and linked once per session
    (shared: read only): {name: (Trace, Variant)}."""
    from synthetic import post_variants

    out = {}
    for name, variant in post_variants(legacy=legacy).items():
        out[name] = (inputs.trace(inputs.file(variant, f"{name}.json.gz")), variant)
    return out


@pytest.fixture(scope="session")
def post_traces(inputs):
    """The post's variants (modern categories), loaded once per session (shared: read only)."""
    return load_post_variants(inputs)


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
