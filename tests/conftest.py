"""Shared fixtures: the real traces in ../shared/traces, test inputs made once, loading helpers.

Tests that need ../shared/traces skip with a reason when it is absent, and
fail instead when TRACEKIT_REQUIRE_SHARED=1 (CI sets it).

Inputs are made once per run (shared by its pytest-xdist workers) and found by their content
(``inputs``: the same bytes give the same file, so two tests that write the same synthetic trace
share one file, one cached database and, in each worker, one opened ``Trace``). Tests marked ``slow``
(exhaustive random matrices, fuzzing) are skipped unless TRACEKIT_SLOW=1; CI (.ci/run) sets it and
runs them all.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
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

# Tables fit $COLUMNS when not a terminal, else 100 (present/humanize.terminal_width). pytest-xdist's workers
# inherit COLUMNS=80 from the controller's terminal writer, so a test's output would depend on the runner: the
# tests see no inherited width, and those that need one set it themselves (monkeypatch, or env= of a process).
os.environ.pop("COLUMNS", None)


# The files that take longest (half a minute or more of one worker each), run first: pytest-xdist hands
# whole files to the workers in collection order (make test's --dist loadfile --no-loadscope-reorder), and a
# long file left for last keeps one worker busy while the other has finished. Only the order changes.
LONG_FIRST = ("test_dataset.py", "test_rope_and_kv_cache.py", "test_export.py", "test_readme.py", "test_cluster.py")


def pytest_collection_modifyitems(config, items):
    """Put the ``LONG_FIRST`` files first (the others, and the tests in each file, keep their order), and skip
    the ``slow`` tests (saying how to run them) unless TRACEKIT_SLOW=1: skipped, never deselected, so a run of
    only slow tests still reports them instead of collecting nothing."""
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FIRST)))
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
    """Test inputs made once per session and found by their content, shared by the session's xdist workers.

    ``file(content, name)`` writes ``content`` (bytes, text, a ``TraceBuilder`` or a post ``Variant``) as
    ``name`` in a folder named by the hash of the bytes, once: the same content under the same name is the
    same path all session, in every worker, so the trace cache (keyed by path, size and times) hits for every
    later test that reads it. ``folder({name: content})`` does the same for a folder of files (ranks),
    ``made(key, name, make)`` for inputs other code writes (``cluster_synthetic.make_job``). ``trace(*paths)`` is
    the database over those files, loaded and linked once per session in ``cache`` (tracekit's own cache, which
    lets one worker build an entry while the other waits for it) and opened read only: tests that use it only
    read (no ``use_rules``, no writes), and do not close it. Whatever a worker writes here appears whole
    (written aside, then linked or renamed into place), and a second writer of the same input keeps the first.
    """

    def __init__(self, root: Path):
        self.root = root
        self.cache = root / "cache"  # a TRACEKIT_CACHE_DIR for the session's workers together
        self._traces: dict[tuple[str, ...], object] = {}

    def _key(self, *parts: bytes) -> str:
        h = hashlib.sha256()
        for part in parts:
            h.update(len(part).to_bytes(8, "little") + part)
        return h.hexdigest()[:20]

    def _aside(self, final: Path) -> Path:
        """A fresh path beside ``final`` for this process to write before putting it in place."""
        final.parent.mkdir(parents=True, exist_ok=True)
        return final.with_name(f".{final.name}.{os.getpid()}.part")

    def file(self, content, name: str = "trace.json") -> Path:
        """``content`` written once as ``name`` (gzip, deterministic, for a ``.gz`` name); its path."""
        data = _content(content)
        path = self.root / self._key(data, name.encode()) / name
        if not path.exists():
            part = self._aside(path)
            part.write_bytes(gzip.compress(data, mtime=0) if name.endswith(".gz") else data)
            try:
                os.link(part, path)  # never replaces: the file (its inode and times: the cache key) stays put
            except FileExistsError:
                pass
            finally:
                part.unlink()
        return path

    def _place(self, staging: Path, final: Path) -> None:
        """Rename the folder ``staging`` to ``final``, unless another worker's is there already."""
        try:
            staging.rename(final)  # a folder another worker put there first stays: ours goes
        except OSError:
            if not final.is_dir():
                raise
            shutil.rmtree(staging)

    def folder(self, files: Mapping[str, object], name: str = "traces") -> Path:
        """A folder ``name`` holding ``{relative path: content}``, written once; its path."""
        datas = {rel: _content(c) for rel, c in sorted(files.items())}
        key = self._key(name.encode(), *(p for rel, d in datas.items() for p in (rel.encode(), d)))
        folder = self.root / key / name
        if not folder.is_dir():
            staging = self._aside(folder)
            for rel, data in datas.items():
                target = staging / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(gzip.compress(data, mtime=0) if rel.endswith(".gz") else data)
            self._place(staging, folder)
        return folder

    def made(self, key: tuple, name: str, make) -> Path:
        """``name`` as ``make(path)`` writes it, once per ``key`` (a repr-able tuple): inputs that other code
        writes, such as ``cluster_synthetic.make_job``."""
        folder = self.root / "made" / self._key(repr(key).encode())
        if not folder.is_dir():
            staging = self._aside(folder)
            staging.mkdir()
            make(staging / name)
            self._place(staging, folder)
        return folder / name

    def trace(self, *paths):
        """The database over ``paths`` (files or folders), loaded and linked once per session, opened read only:
        shared, so tests only read it."""
        import tracekit

        key = tuple(str(Path(p).resolve()) for p in paths)
        if key not in self._traces:
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("TRACEKIT_CACHE_DIR", str(self.cache))
                self._traces[key] = tracekit.load(list(paths), cache=True, link=True)
        return self._traces[key]

    def close(self) -> None:
        for trace in self._traces.values():
            trace.close()
        self._traces.clear()


def _session_root(tmp_path_factory) -> Path:
    """The run's own temporary folder: under pytest-xdist the one holding every worker's (their basetemp is
    ``<root>/<worker>``), else this process's basetemp."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def inputs(tmp_path_factory):
    """The run's ``Inputs``: test inputs made once, by content, shared by its xdist workers."""
    store = Inputs(_session_root(tmp_path_factory) / "inputs")
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
def load_shared(shared_dir, inputs):
    """A shared trace loaded and linked once per session (``inputs.trace``; read only):
    ``load_shared("hta/x.json.gz")``."""
    return lambda rel: inputs.trace(shared_dir / rel)


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


@pytest.fixture(autouse=True, scope="session")
def _check_sql_modules():
    """Under TRACEKIT_SLOW=1 (CI) every build in the tests checks each SQL module's header against what the
    module did (a fifth of a build's time); tests/test_sql_modules.py checks in every run."""
    from tracekit.common import sqlmodules

    sqlmodules.CHECK = SLOW
    yield
    sqlmodules.CHECK = False
