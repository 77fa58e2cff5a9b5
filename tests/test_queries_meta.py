"""Every shipped query is documented, matches its header, and has golden output.

Golden files live in tests/golden/<query id>/<input>.csv: the query's CSV
output on that input. Set TRACEKIT_UPDATE_GOLDEN=1 to rewrite them, then
review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from cluster_synthetic import GOLDEN_JOB, make_job
from conftest import require_shared
from synthetic import post_variants

from tracekit.cli import cli
from tracekit.library import queries

GOLDEN = Path(__file__).parent / "golden"
SHIPPED = sorted(queries.library().values(), key=lambda q: q.id)


# Inputs for golden runs: name -> function of the session's ``Inputs`` returning a path, made once per session
# (the CLI's trace cache then loads and links each once). synthetic_<variant> is one of the post's variants
# built by tests/synthetic.py.
def _synthetic(variant: str):
    def make(inputs) -> Path:
        return inputs.file(post_variants([variant])[variant], f"synthetic_{variant}.json.gz")

    return make


def _cluster(inputs) -> Path:
    # Four ranks of one job built from the real NCCL rank 0: skewed clocks, rank 2 late (tests/cluster_synthetic.py).
    source = require_shared() / "hta/a100_nccl_rank0.json.gz"
    return inputs.made(
        ("make_job", GOLDEN_JOB), "cluster_a100_4ranks", lambda path: make_job(source, path, **GOLDEN_JOB)
    )


def _ranks_flash_math(inputs) -> Path:
    # Two ranks whose attention differs by construction: rank 0 runs the flash variant, rank 1 the math one.
    variants = post_variants(["flash", "math"])
    return inputs.folder(
        {"rank0.json.gz": variants["flash"], "rank1.json.gz": variants["math"]}, "synthetic_ranks_flash_math"
    )


def _shared(rel: str):
    return lambda inputs: require_shared() / rel


INPUTS = {
    **{f"synthetic_{v}": _synthetic(v) for v in ("naive", "inplace", "math", "efficient", "flash", "cudnn")},
    "h100_bert-small_sdpa-flash": _shared("tracelens/h100_bert-small_sdpa-flash.json.gz"),
    "mi300_bert-small_sdpa-flash": _shared("tracelens/mi300_bert-small_sdpa-flash.json.gz"),
    "b200_vllm_eager_paged-fp8": _shared("tracelens/b200_vllm_eager_paged-fp8.json.gz"),
    "mi300_sglang_qwen3-8b_decode_hipgraph": _shared("tracelens/mi300_sglang_qwen3-8b_decode_hipgraph.json.gz"),
    "a100_nccl_rank0": _shared("hta/a100_nccl_rank0.json.gz"),
    "mi300_falconsai_vit_sdpa_modules": _shared("tracelens/mi300_falconsai_vit_sdpa_modules.json.gz"),
    # A training step recorded on an H200 (sample_traces/gpu_h200): forward and backward attention calls.
    "llama_train_sdpa": lambda tmp: (
        Path(__file__).parent.parent / "sample_traces" / "gpu_h200" / "llama_train_sdpa.json.gz"
    ),
    "cluster_a100_4ranks": _cluster,
    "synthetic_ranks_flash_math": _ranks_flash_math,
}


def golden_cases():
    for q in SHIPPED:
        d = GOLDEN / q.id
        for f in sorted(d.glob("*.csv")) if d.is_dir() else []:
            yield pytest.param(q, f, id=f"{q.id}/{f.stem}")


@pytest.fixture(scope="module")
def cpu_naive(inputs):
    """The CPU naive sample, loaded and linked once (shared: read only)."""
    return inputs.trace(Path(__file__).parent.parent / "sample_traces" / "cpu_attention" / "naive.json.gz")


@pytest.mark.parametrize("q", SHIPPED, ids=lambda q: q.id)
def test_header_matches_the_result_columns(q, cpu_naive):
    assert q.title.endswith(".") and q.description, f"{q.path}: title and description needed"
    trace = cpu_naive
    described = trace.con.execute(f"DESCRIBE {q.sql}", q.bind({})).fetchall()
    got = [(r[0], r[1]) for r in described]
    want = [(c.name, c.type) for c in q.columns]
    assert got == want, f"{q.path}: @column lines do not match DESCRIBE"
    assert all(c.doc for c in q.columns)
    assert "ORDER BY" in q.sql.upper()


@pytest.mark.parametrize("q", SHIPPED, ids=lambda q: q.id)
def test_every_query_has_a_golden_file(q):
    assert list((GOLDEN / q.id).glob("*.csv")), f"no golden output for {q.id} in {GOLDEN / q.id}"


@pytest.mark.parametrize("q,golden", list(golden_cases()))
def test_golden_output(q, golden, inputs):
    stem = golden.stem
    input_name, _, param_text = stem.partition("__")
    args = ["query", q.id, str(INPUTS[input_name](inputs)), "-f", "csv"]
    for pair in filter(None, param_text.split("__")):
        args += ["-p", pair]
    # The session's cache: each input is loaded and linked once for all the workers.
    result = CliRunner().invoke(cli, args, env={"TRACEKIT_CACHE_DIR": str(inputs.cache)}, catch_exceptions=False)
    assert result.exit_code == 0
    # The golden is what goes to stdout; notes (left-out orphans) go to stderr.
    if os.environ.get("TRACEKIT_UPDATE_GOLDEN") == "1":
        golden.write_text(result.stdout)
    assert result.stdout == golden.read_text()


def test_declared_but_unused_parameter_is_an_error(tmp_path):
    path = tmp_path / "q.sql"
    path.write_text("-- T.\n--\n-- @param x BIGINT = 1   x\n-- @column a BIGINT  a\nSELECT 1 AS a ORDER BY a;\n")
    with pytest.raises(queries.QueryError, match=r"q.sql:3: parameter 'x' is declared but not used"):
        queries.parse(path, "q")


def test_query_without_header_is_an_error(tmp_path):
    path = tmp_path / "q.sql"
    path.write_text("SELECT 1;\n")
    with pytest.raises(queries.QueryError, match="has no header"):
        queries.parse(path, "q")


def test_generated_docs_are_current():
    from tracekit import docgen

    assert docgen.main(["--check"]) == 0, "run `make docs` and commit the result"


def test_every_query_folder_ships_in_the_wheel():
    import tomllib

    config = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())["tool"]["setuptools"]
    root = queries.shipped_dir()
    folders = {".".join(("tracekit.queries", *p.relative_to(root).parts)) for p in root.rglob("*") if p.is_dir()}
    folders.discard("tracekit.queries.__pycache__")
    assert folders <= set(config["packages"])
    assert all(f in config["package-data"] for f in folders)
