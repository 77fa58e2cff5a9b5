"""The trace zoo (capture/zoo.py) with its ground truth: every tiny model recorded with module scopes and
stripped of them; the stages tracekit decides on the stripped copy against those on the scoped copy.

The zoo is recorded once per session (``inputs.made``, keyed by the zoo's sources and the torch and
transformers versions). First the scoped copies are checked on their own (one call per attention module
forward, each with projections and a core); then, per case, the issue's bar (`stripped_agreement`): at most
5 % of the scoped attention time called ``other`` without the scopes, at least 95 % of the core-stage time
given the same stage. Cases below the bar today are strict xfails whose reason holds the measured numbers
and the cause, so that a fix turns them into failures to update.
"""

from __future__ import annotations

import collections
import gzip
import hashlib
import json
from pathlib import Path

import pytest
from conftest import SLOW
from stripped_agreement import CORE_MIN_PCT, OTHER_MAX_PCT, agreement

from capture import zoo

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("capture/zoo.py", "capture/zoo_models.py", "capture/session.py")

# Measured on the CPU zoo (torch 2.13, transformers 5.25, one intra-op thread; robust weights): the cases
# below the bar, with their numbers and why. Strict: a fix makes the case pass and this entry fail.
_BERT = (
    "BertSelfOutput's residual add and LayerNorm (out_proj in the scoped call) stay outside the stripped call: "
    "a post-norm layer's ops run in a pre-norm layer's order, so without the scope the block ends at the "
    "output projection (docs/attribution.md, post-norm models)"
)
_T5 = (
    "the scoped call is T5LayerSelfAttention / T5LayerCrossAttention: its pre-norm (T5LayerNorm, the layer's "
    "input norm, which Llama's attention module leaves out) and its residual dropout and add are other without "
    "the scopes (a module convention: the op sequence is a pre-norm layer's)"
)
_T5_BARE = (
    f"{_T5}; without shapes the first layer's relative-position bias (bucket arithmetic, the bias table's "
    "lookup) is not told from the scores' mask and layout ops, nor, before QK^T, from a rotary embedding"
)
# Recorded in every run (a local `make test`): one case per code path the attribution reads differently (eager,
# SDPA, q/k norms, Conv1D, post-norm, relative position bias, cross-attention, MHA's slow and fast paths, the
# encoder layer, Hugging Face's own Llama); the whole matrix (compiled, flex, training, every family on both
# sides) under TRACEKIT_SLOW=1, as CI runs it.
FAST_CASES = (
    "torch_llama_eager",
    "torch_llama_sdpa",
    "torch_qwen3_eager",
    "torch_gpt2_eager",
    "torch_bert_sdpa",
    "torch_t5_eager",
    "torch_whisper_sdpa",
    "torch_mha_slow",
    "torch_mha_fast",
    "torch_encoder_layer_fast",
    "hf_llama_sdpa",
)
BELOW_BAR: dict[str, str] = {
    "torch_bert_eager": f"other 7.7 %, core right 100 %: {_BERT}",
    "torch_bert_sdpa": f"other 11.1 %, core right 100 %: {_BERT}",
    "hf_bert_eager": f"other 9.0 %, core right 100 %: {_BERT}",
    "hf_bert_sdpa": f"other 10.7 %, core right 100 %: {_BERT}",
    "torch_t5_eager": f"other 15.1-17.5 %, core right 100 %: {_T5}",
    "hf_t5_eager": f"other 15.7 %, core right 100 %: {_T5}",
}
# Scoped copies that are themselves wrong (their module scopes do not give one plausible call per forward).
SCOPED_WRONG: dict[str, str] = {}


def _transformers_version() -> str | None:
    try:
        import transformers
    except ImportError:
        return None
    return transformers.__version__


@pytest.fixture(scope="session")
def zoo_dir(inputs) -> Path:
    """The zoo, recorded once per session (and per version of its sources and of torch/transformers): every
    case under TRACEKIT_SLOW=1 (CI), else ``FAST_CASES``."""
    digest = hashlib.sha256(b"".join((ROOT / p).read_bytes() for p in SOURCES)).hexdigest()[:16]
    names = None if SLOW else FAST_CASES
    key = ("zoo", digest, torch.__version__, _transformers_version(), names)
    return inputs.made(key, "zoo", lambda path: zoo.record_zoo(path, names))


@pytest.fixture(scope="session")
def manifest(zoo_dir) -> dict:
    return json.loads((zoo_dir / "manifest.json").read_text())


@pytest.fixture(scope="session")
def entries(manifest) -> dict[str, dict]:
    return {e["name"]: e for e in manifest["traces"]}


@pytest.fixture(scope="session")
def loaded(zoo_dir, manifest, inputs):
    """Every scoped copy in one database and every stripped copy in another (shared: read only)."""
    traces = manifest["traces"]
    scoped = inputs.trace(*(zoo_dir / e["scoped"] for e in traces))
    stripped = inputs.trace(*(zoo_dir / e["stripped"] for e in traces))
    return scoped, stripped


@pytest.fixture(scope="session")
def bare(zoo_dir, manifest, inputs):
    """Every scoped copy as the profiler records it by default (no Python stacks, no shapes), in one database
    (shared: read only), with the pairs by file name."""
    traces = manifest["traces"]
    key = ("zoo-bare", str(zoo_dir), tuple(e["scoped"] for e in traces))

    def make(path: Path) -> None:
        path.mkdir()
        for e in traces:
            zoo.strip_python_functions(zoo_dir / e["scoped"], path / e["stripped"], shapes=False)

    folder = inputs.made(key, "bare", make)
    return inputs.trace(*(folder / e["stripped"] for e in traces))


@pytest.fixture(scope="session")
def measured_bare(manifest, loaded, bare) -> dict:
    """Each case's `Agreement` without stacks or shapes (robust weights)."""
    scoped, _ = loaded
    traces = manifest["traces"]
    results = agreement(scoped, bare, robust=True, pairs={e["scoped"]: e["stripped"] for e in traces})
    return {e["name"]: r for e, r in zip(traces, results)}


@pytest.fixture(scope="session")
def measured(manifest, loaded) -> dict:
    """Each case's `Agreement` (robust weights: see stripped_agreement)."""
    scoped, stripped = loaded
    traces = manifest["traces"]
    results = agreement(scoped, stripped, robust=True, pairs={e["scoped"]: e["stripped"] for e in traces})
    return {e["name"]: r for e, r in zip(traces, results)}


def _recorded(name: str, entries: dict, manifest: dict) -> dict:
    """The case's manifest entry, or skip saying why it could not be recorded here."""
    if name in entries:
        return entries[name]
    reasons = {u["name"]: u["reason"] for u in manifest["unavailable"]}
    pytest.skip(f"{name} not recorded here: {reasons[name]}")


def _cases(known: dict[str, str]) -> list:
    """Every case: those of FAST_CASES in every run, the others under TRACEKIT_SLOW=1; the known ones strict xfails."""
    return [
        pytest.param(
            name,
            marks=[
                *([pytest.mark.xfail(strict=True, reason=known[name])] if name in known else []),
                *([] if name in FAST_CASES else [pytest.mark.slow]),
            ],
        )
        for name in zoo.CASE_NAMES
    ]


def test_manifest_accounts_for_every_case(manifest, zoo_dir):
    """Each case is recorded (both copies on disk) or unavailable for a reason this machine gives: a missing
    optional package, or a backend torch refuses here; never another failure."""
    recorded = [e["name"] for e in manifest["traces"]]
    unavailable = {u["name"]: u["reason"] for u in manifest["unavailable"]}
    assert sorted(recorded + list(unavailable)) == sorted(zoo.CASE_NAMES if SLOW else FAST_CASES)
    cases = {c.name: c for c in zoo.CASES}
    for name, reason in unavailable.items():
        assert reason and "\n" not in reason
        assert cases[name].may_fail or (cases[name].requires and "not installed" in reason), (name, reason)
    if _transformers_version() is not None:
        assert not [n for n in unavailable if cases[n].requires]
    for entry in manifest["traces"]:
        assert (zoo_dir / entry["scoped"]).is_file() and (zoo_dir / entry["stripped"]).is_file()
        assert entry["attention_calls"] == cases[entry["name"]].calls_per_step * zoo.ZOO_SCHEDULE.active


def test_stripped_copy_is_the_scoped_recording_without_python_functions(manifest, zoo_dir):
    """Same events in the same order, less every python_function; the metadata says what was removed."""
    for entry in manifest["traces"]:
        with gzip.open(zoo_dir / entry["scoped"], "rt") as fh:
            scoped = json.load(fh)
        with gzip.open(zoo_dir / entry["stripped"], "rt") as fh:
            stripped = json.load(fh)
        kept = [e for e in scoped["traceEvents"] if e.get("cat") != "python_function"]
        assert stripped["traceEvents"] == kept, entry["name"]
        removed = len(scoped["traceEvents"]) - len(kept)
        assert removed == entry["python_functions_removed"] > 0
        assert any(e["name"].startswith("nn.Module: ") for e in scoped["traceEvents"]), entry["name"]
        meta, smeta = scoped["tracekit_capture"], stripped["tracekit_capture"]
        assert meta["profiler"]["with_stack"] and meta["profiler"]["with_modules"]
        assert not smeta["profiler"]["with_stack"] and not smeta["profiler"]["with_modules"]
        assert smeta["stripped_from"] == entry["scoped"] and meta["zoo_case"] == entry["name"]


_CALL_STAGES = """
SELECT c.call_id, list(DISTINCT st.stage ORDER BY st.stage) AS stages
FROM attention_calls c JOIN traces t USING (trace_id) LEFT JOIN cpu_stages st ON st.call_id = c.call_id
WHERE c.direction = 'forward' AND t.path LIKE '%/' || $file
GROUP BY c.call_id ORDER BY c.call_id
"""


@pytest.mark.parametrize("name", _cases(SCOPED_WRONG))
def test_scoped_copy_is_right(name, manifest, entries, loaded):
    """The truth itself: one forward call per attention module forward, and each holds the projections and a
    core (QK^T, softmax and PV, or a fused op)."""
    entry = _recorded(name, entries, manifest)
    scoped, _ = loaded
    calls = scoped.rows(_CALL_STAGES, {"file": entry["scoped"]})
    assert len(calls) == entry["attention_calls"]
    for call_id, stages in calls:
        core = "fused_attention" in stages or {"qk_matmul", "softmax", "pv_matmul"} <= set(stages)
        assert core and {"qkv_proj", "out_proj"} <= set(stages), (call_id, stages)


@pytest.mark.parametrize("name", _cases(BELOW_BAR))
def test_stripped_copy_agrees_with_scoped(name, manifest, entries, measured):
    """The issue's bar on each zoo trace: without the scopes, at most 5 % of the attention time is lost to
    other and at least 95 % of the core-stage time keeps its stage."""
    _recorded(name, entries, manifest)
    result = measured[name]
    assert result.unmatched == 0 and result.matched > 0
    assert result.attention_ns > 0 and result.core_ns > 0
    summary = f"{result.row()}; largest differences {result.worst()}"
    assert result.other_pct <= OTHER_MAX_PCT, summary
    assert result.core_right_pct >= CORE_MIN_PCT, summary


# Without shapes too (the profiler's defaults: record_shapes=False), below the bar: the same module conventions.
BELOW_BAR_BARE: dict[str, str] = {
    **{n: r for n, r in BELOW_BAR.items() if "bert" in n},
    "torch_t5_eager": f"other 16.0 %, core right 100 %: {_T5_BARE}",
    "hf_t5_eager": f"other 20.0 %, core right 100 %: {_T5_BARE}",
}


@pytest.mark.parametrize("name", _cases(BELOW_BAR_BARE))
def test_copy_without_stacks_or_shapes_agrees_with_scoped(name, manifest, entries, measured_bare):
    """The same bar on each zoo trace recorded the profiler's default way, without Python stacks and without
    shapes: the blocks are read off the op names (GPT-2's eager pattern, five score ops between QK^T and the
    softmax, found none of its calls before score ops counted without shapes; eager flex_attention's rotary
    embedding took its block mask's ops; nn.MultiheadAttention's averaged weights stayed out: 17 %)."""
    _recorded(name, entries, manifest)
    result = measured_bare[name]
    assert result.unmatched == 0 and result.matched > 0
    summary = f"{result.row()}; largest differences {result.worst()}"
    assert result.other_pct <= OTHER_MAX_PCT, summary
    assert result.core_right_pct >= CORE_MIN_PCT, summary
    assert result.forward_calls_stripped == result.forward_calls_scoped, summary


# The other direction, no issue bar but ours: what the stripped copy adds to attention that the scoped copy
# leaves out, at most EXTRA_MAX_PCT of the scoped attention time.
EXTRA_MAX_PCT = 5.0
# Known cases above it: none (BERT's layer 0 took in the model's extended attention mask, 3.6-13.9 %, until a
# block's lead was cut to its layers' consensus).
EXTRA_KNOWN: dict[str, str] = {}


@pytest.mark.parametrize("name", _cases(EXTRA_KNOWN))
def test_stripped_copy_adds_little_to_attention(name, manifest, entries, measured):
    """Without the scopes, what the calls take in beyond the attention modules (a neighbouring model's
    projection, the embeddings) stays small: CLIP's text layer 0 took in the vision model's last projection
    and the text embeddings (15 % of its attention time) until the block's start read the dims of the ops
    between two projections, not only their width (attribution/eager_block_ends)."""
    _recorded(name, entries, manifest)
    result = measured[name]
    summary = f"{result.row()}, extra {result.extra_pct:.1f} %; largest differences {result.worst()}"
    assert result.extra_pct <= EXTRA_MAX_PCT, summary


def test_agreement_of_a_trace_with_itself_and_with_a_stranger(manifest, loaded):
    """The measure itself: a scoped copy against itself agrees on everything; against another case's trace
    no op matches."""
    scoped, _ = loaded
    first, second = manifest["traces"][0]["scoped"], manifest["traces"][1]["scoped"]
    same, stranger = agreement(scoped, scoped, pairs={first: first, second: first})
    assert same.unmatched == 0 and same.matched > 0 and not same.confusion
    assert (same.other_pct, same.core_right_pct) == (0.0, 100.0) and same.attention_ns > 0
    assert stranger.matched == 0 and stranger.unmatched > 0


def test_zoo_command_records_the_cases_named(tmp_path, capsys):
    """``python -m capture zoo OUTDIR --only ...``: a line per case, the manifest, exit 0; an unknown case is
    one Error line and exit 1."""
    from capture.cli import main

    assert main(["zoo", str(tmp_path), "--only", "torch_mha_fast"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("torch_mha_fast: ") and out[0].endswith(
        "-> torch_mha_fast.scoped.json.gz, torch_mha_fast.stripped.json.gz"
    )
    assert out[1] == f"manifest -> {tmp_path / 'manifest.json'}"
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert [e["name"] for e in manifest["traces"]] == ["torch_mha_fast"] and manifest["unavailable"] == []
    assert main(["zoo", str(tmp_path), "--only", "nope"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: unknown zoo case(s) nope: choose from torch_llama_eager, ") and err.count("\n") == 1


def test_zoo_command_records_in_another_dtype_and_refuses_a_missing_gpu(tmp_path, capsys):
    """``--dtype bfloat16``: the model and its floating inputs in that dtype, said in the trace's metadata and
    the manifest, and its call still one per forward; ``--device cuda`` without a GPU: one Error line, exit
    1, nothing written (the GPU zoo is the same command on a lent GPU)."""
    import tracekit
    from capture.cli import main

    assert main(["zoo", str(tmp_path / "bf16"), "--only", "torch_llama_sdpa", "--dtype", "bfloat16"]) == 0
    manifest = json.loads((tmp_path / "bf16" / "manifest.json").read_text())
    assert (manifest["device"], manifest["dtype"]) == ("cpu", "bfloat16")
    (entry,) = manifest["traces"]
    with gzip.open(tmp_path / "bf16" / entry["scoped"], "rt") as fh:
        trace = json.load(fh)
    assert trace["tracekit_capture"]["dtype"] == "bfloat16"
    types = {t for e in trace["traceEvents"] if e.get("name") == "aten::linear" for t in e["args"]["Input type"]}
    assert "c10::BFloat16" in types
    with tracekit.load(tmp_path / "bf16" / entry["stripped"]) as loaded:
        assert len(loaded.query("attention_calls").to_dicts()) == entry["attention_calls"]
    capsys.readouterr()
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: --device cuda would record")
    assert main(["zoo", str(tmp_path / "gpu"), "--only", "torch_mha_fast", "--device", "cuda"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: --device cuda: torch.cuda.is_available() is False") and err.count("\n") == 1
    assert not (tmp_path / "gpu").exists()


def test_stripped_t5_scores_ops_between_qk_and_softmax_are_the_position_bias(manifest, entries, loaded):
    """The plain-torch T5 builds its first layer's relative-position bias between QK^T and the softmax: in the
    stripped copy those ops (bucket arithmetic, the bias table's embedding lookup) belong to the call and are
    position_bias or mask, never other, as the scoped copy's module scopes (the truth) say: by their position
    between the two, or as the bias table read by the heads (a [buckets, H] table) with the ops that make its
    index and shape it. Each
    such op is matched to its scoped twin by time, name and thread."""
    entry = _recorded("torch_t5_eager", entries, manifest)
    scoped, stripped = loaded
    q = """SELECT s.ts_ns, s.name, s.tid, st.stage, st.call_id IS NOT NULL AS in_call, st.rule
           FROM cpu_stages st JOIN cpu_slices s USING (id) JOIN traces t ON t.trace_id = s.trace_id
           WHERE t.path LIKE '%/' || $file AND s.kind = 'cpu_op'"""
    truth = {r[:3]: r[3] for r in scoped.rows(q, {"file": entry["scoped"]})}
    rules = (
        "eager: between the QK^T product and the softmax",
        "eager: a bias table read by the heads, its index and shape",
    )
    got = [r for r in stripped.rows(q, {"file": entry["stripped"]}) if r[5] in rules]
    assert got, "no op between QK^T and the softmax was decided by its position"
    assert all(r[4] for r in got)
    pairs = collections.Counter((truth[r[:3]], r[3]) for r in got)
    # Every op takes the scoped copy's stage: the bias's construction position_bias (the layer that reads the
    # bias table), the scores' modification mask (44 and 6 ops on torch 2.13).
    assert all(want == have for want, have in pairs) and pairs[("position_bias", "position_bias")] > 0, pairs
    # The bucket arithmetic that no rule names (abs, log, lt, gt, ...) is among them.
    assert {"aten::abs", "aten::log"} <= {r[1] for r in got}
