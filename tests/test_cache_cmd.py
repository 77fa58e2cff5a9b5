"""tracekit cache: list, clear, and a size cap that evicts the least recently used."""

import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.store import database

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces" / "gpu_a100_synthetic"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(d))
    monkeypatch.delenv("TRACEKIT_CACHE_MAX", raising=False)
    return d


def run(*args):
    res = CliRunner().invoke(cli, [str(a) for a in args])
    assert res.exit_code == 0, res.output
    return res.output


def _age(path: Path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_list_and_clear(cache):
    run("query", "gpu_timeline", SAMPLES / "flash.json.gz")
    run("query", "gpu_timeline", SAMPLES / "naive.json.gz")
    listed = run("cache", "list", "-f", "csv").splitlines()
    assert listed[0] == "file,size_bytes,last_used,traces,inputs"
    assert len(listed) == 3 and {ln.rsplit(",", 1)[1].rsplit("/", 1)[1] for ln in listed[1:]} == {
        "flash.json.gz",
        "naive.json.gz",
    }
    assert "2 cached database(s)" in run("cache")
    files = sorted(cache.glob("*.duckdb"))
    _age(files[0], 40 * 86400)
    assert sorted(cache.glob("*.lock")) == [f.with_suffix(".lock") for f in files]  # each build's lock
    assert "removed 1 cached database(s)" in run("cache", "clear", "--older-than", 30)
    assert sorted(cache.glob("*.duckdb")) == files[1:]
    assert sorted(cache.glob("*.lock")) == [files[1].with_suffix(".lock")]  # the removed one's lock went with it
    assert "removed 1 cached database(s)" in run("cache", "clear")
    assert not list(cache.iterdir())


def test_cap_evicts_least_recently_used(cache, monkeypatch):
    run("query", "gpu_timeline", SAMPLES / "flash.json.gz")
    run("query", "gpu_timeline", SAMPLES / "naive.json.gz")
    old, recent = sorted(cache.glob("*.duckdb"), key=lambda f: f.stat().st_mtime)
    _age(old, 3600)
    _age(recent, 3600)
    run("query", "gpu_timeline", SAMPLES / "flash.json.gz")  # a cache hit: flash is now the most recent
    flash = max(cache.glob("*.duckdb"), key=lambda f: f.stat().st_mtime)
    one = flash.stat().st_size
    monkeypatch.setenv("TRACEKIT_CACHE_MAX", str(int(one * 2.5)))
    run("query", "gpu_timeline", SAMPLES / "math.json.gz")  # a third database: the least recently used goes
    left = set(cache.glob("*.duckdb"))
    assert len(left) == 2 and flash in left
    monkeypatch.setenv("TRACEKIT_CACHE_MAX", "1KB")  # smaller than any database: only the new one stays
    run("query", "gpu_timeline", SAMPLES / "cudnn.json.gz")
    (kept,) = cache.glob("*.duckdb")
    assert list(cache.glob("*.lock")) == [kept.with_suffix(".lock")]  # the evicted ones' locks are gone


def test_size_parsing():
    assert database.parse_size("5GB") == 5 * 10**9
    assert database.parse_size("1.5 MiB") == int(1.5 * 2**20)
    assert database.parse_size("0") == 0
    with pytest.raises(Exception, match="not a size"):
        database.parse_size("lots")
