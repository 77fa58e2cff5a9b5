"""The table format: units, widths, row limits, middle-shortening and demangled names."""

from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.common import names
from tracekit.present import humanize

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces" / "gpu_a100_synthetic"
# A kernel as ROCm's aiter library reports it (mi300 sglang trace in ../shared/traces).
AITER = "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb0ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib"


def lines(text):
    return text.rstrip("\n").splitlines()


def test_durations_get_one_unit_per_table_named_in_the_header():
    t = pa.table(
        {
            "gpu_ns": [146_816, 7_239_000],
            "cpu_ns": [12_000_000, 1_000],  # no gpu_µs beside cpu_ms: one unit for every duration
            "delta_ns_per_call": [-405_760, 0],
            "share_pct": [38.9091, 0.0],
            "ratio": [0.5087, None],
            "trace_id": [12345, 2],
            "count": [1234567, 1],
            "ts_ns": [2_413_668_742_269_099, 1],
        }
    )
    out = lines(humanize.table_text(t, wide=True))
    assert out[0].split() == [
        "gpu_ms",
        "cpu_ms",
        "delta_ms_per_call",
        "share_pct",
        "ratio",
        "trace_id",
        "count",
        "ts_ns",
    ]
    assert out[2].split() == ["0.147", "12.000", "-0.406", "38.9", "0.51x", "12345", "1,234,567", "2413668742269099"]
    assert out[3].split() == ["7.239", "0.001", "0.000", "0.0", "2", "1", "1"]
    assert out[-1] == "(2 rows)"


def test_one_outlier_does_not_round_the_other_durations_to_zero():
    t = pa.table({"gpu_ns": [100_000 + i for i in range(19)] + [20_000_000_000], "cpu_ns": [50_000] * 20})
    out = lines(humanize.table_text(t, rows=0))
    assert out[0].split() == ["gpu_µs", "cpu_µs"]
    assert out[2].split() == ["100.0", "50.0"] and out[-2].split() == ["20,000,000.0", "50.0"]


def test_sizes_get_a_unit_too():
    t = pa.table({"size_bytes": [4_468_736, 1_000], "events_bytes": [512, 10]})
    out = lines(humanize.table_text(t, wide=True))
    assert out[0].split() == ["size_KB", "events_bytes"]
    assert out[2].split() == ["4,468.7", "512"]


def test_csv_keeps_the_raw_values(tmp_path):
    res = CliRunner().invoke(
        cli, ["query", "region_summary", str(SAMPLES / "inplace.json.gz"), "-p", "pattern=^attn_fwd$", "-f", "csv"]
    )
    assert res.exit_code == 0, res.output
    header, row = res.output.splitlines()[:2]
    assert "gpu_time_avg_ns" in header.split(",") and "1955000.0" in row.split(",")


def test_tables_fit_100_columns_unless_wide():
    long = [f"at::native::elementwise_kernel<128, 4, {'x' * 80}_{i}>(int)" for i in range(3)]
    t = pa.table({"trace": ["a", "b", "c"], "name": long, "total_ns": [1, 2, 3], "avg_ns": [1, 2, 3]})
    narrow = lines(humanize.table_text(t, width=100))
    assert max(map(len, narrow)) <= 100
    start = narrow[0].index("name")
    shown = [r[start:].rsplit(None, 2)[0] for r in narrow[2:5]]
    assert len(set(shown)) == 3 and all("…" in s for s in shown)
    wide = humanize.table_text(t, wide=True)
    assert all(n in wide for n in long)


def test_columns_that_do_not_fit_are_named():
    t = pa.table({f"column_number_{i}": [i] for i in range(12)})
    out = lines(humanize.table_text(t, width=100))
    assert max(map(len, out)) <= 100
    assert out[-1].startswith("(6 more columns with --wide: column_number_6, ")


def test_row_limit_says_how_many_more():
    t = pa.table({"n": list(range(100))})
    out = lines(humanize.table_text(t, rows=40))
    assert len(out) == 2 + 40 + 1
    assert out[-1] == "(40 of 100 rows; 60 more rows: --rows 0)"
    assert len(lines(humanize.table_text(t, rows=0))) == 2 + 100 + 1


def test_shorten_keeps_head_and_tail():
    text = "cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_6_128x64x64_4x1x1_cga1x1x1_kernel0_0"
    short = names.shorten(text, 30)
    assert len(short) == 30 and short.startswith("cudnn_generated") and short.endswith("kernel0_0")
    assert names.shorten("softmax", 30) == "softmax"
    # A signature's parameter list goes first.
    assert names.shorten("f<int, 4>(float*, float const*, int, int, bool)", 20) == "f<int, 4>"


def test_kernel_names_shorten_by_eliding_templates_and_namespaces_not_the_middle():
    gemm = "void cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::GemmShape<128, 128, 32>, float>(Params)"
    text = names.readable(gemm)
    assert names.shorten(text, 60) == "cutlass::…::GemmUniversal<GemmShape<128, 128, 32>, float>"
    assert names.shorten(text, 30) == "cutlass::…::GemmUniversal<…>"
    assert names.shorten(text, 20) == "GemmUniversal<…>"
    # Anonymous namespaces, lambda chains and parameter lists are noise.
    where = (
        "at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::(anonymous namespace)"
        "::where_kernel_impl(at::TensorIterator&)::{lambda()#1}::operator()() const::{lambda(bool, float, float)#1}>"
        "(at::TensorIteratorBase&, at::native::(anonymous namespace)::where_kernel_impl(at::TensorIterator&) const&)>(int)"
    )
    assert names.shorten(where, 70) == "elementwise_kernel<128, 4, gpu_kernel_impl_nocast<where_kernel_impl>>"
    assert names.shorten("nn.Module: Qwen3AttentionWithRotary_0", 30) == "Qwen3AttentionWithRotary_0"


def test_shorten_all_keeps_distinct_names_distinct():
    # Two real kernels that differ only deep in the middle (the naive and math variants' masked_fill / where).
    a = "at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::(anonymous namespace)::masked_fill_kernel(at::TensorIterator&)::{lambda(int)#1}>(int)"
    b = "at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::(anonymous namespace)::where_kernel_impl(at::TensorIterator&)::{lambda(int)#1}>(int)"
    out = names.shorten_all([a, b, "short"], 30)
    assert out["short"] == "short"
    assert out[a] != out[b] and len(out[a]) <= 30 and len(out[b]) <= 30
    assert "fill_kernel" in out[a] and "kernel_impl" in out[b]


def test_demangle():
    assert names.demangle(AITER).startswith("void aiter::add_rmsnorm_quant_kernel<")
    assert names.readable(AITER).startswith("aiter::add_rmsnorm_quant_kernel<")
    assert names.demangle("ampere_sgemm_128x64_tn") == "ampere_sgemm_128x64_tn"
    assert names.demangle("_Znot_really_mangled") == "_Znot_really_mangled"


def test_diff_by_kernel_never_shows_one_name_as_added_and_removed():
    res = CliRunner().invoke(
        cli, ["diff", str(SAMPLES / "naive.json.gz"), str(SAMPLES / "math.json.gz"), "--by", "kernel"]
    )
    assert res.exit_code == 0, res.output
    out = lines(res.stdout)  # notes (left-out orphans) go to stderr
    assert max(map(len, out)) <= 100
    body = [line for line in out[2:] if not line.startswith("(")]
    csv_rows = CliRunner().invoke(
        cli, ["diff", str(SAMPLES / "naive.json.gz"), str(SAMPLES / "math.json.gz"), "--by", "kernel", "-f", "csv"]
    )
    assert len(body) == len(csv_rows.stdout.splitlines()) - 1 == 21
    shown = {}
    at = out[0].index("change")
    for row in body:
        name, change = row[:at].strip(), row[at:].split()[0]
        shown.setdefault(name, set()).add(change)
    assert len(shown) == len(body)  # every row's name is its own
    assert not [n for n, c in shown.items() if {"added", "removed"} <= c]
    # Readable at 100 columns: the deltas shown, names shortened by eliding, not cut to their namespace.
    assert out[0].split()[-3:] == ["delta_µs", "delta_pct", "ratio"]
    assert not [n for n in shown if n.startswith(("(anonymous", "at::n…"))]
    assert "elementwise_kernel<128…st<where_kernel_impl>>" in shown


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_dash_writes_to_stdout(fmt):
    res = CliRunner().invoke(cli, ["query", "gpu_timeline", str(SAMPLES / "flash.json.gz"), "-f", fmt, "-o", "-"])
    assert res.exit_code == 0 and "flash" in res.output
    assert not Path("-").exists()


def test_finding_messages_show_kernel_names_demangled_and_shortened():
    from tracekit.present.values import format_unit

    shown = format_unit(AITER, "short")
    assert shown == "aiter::add_rmsnorm_quant_kernel<…>"
    assert format_unit("ampere_sgemm_128x64_tn", "short") == "ampere_sgemm_128x64_tn"


def _rows(n: int, start: int = 0) -> pa.Table:
    ids = range(start, start + n)
    return pa.table(
        {
            "trace": [f"trace_{i % 7}" for i in ids],
            "name": [f"at::native::kernel<{i % 1000}, float>(int)" for i in ids],
            "row_id": list(ids),
            "gpu_ns": [i * 1000 for i in ids],
        }
    )


def test_table_output_streams_in_linear_time_and_loses_no_row():
    import io
    import time

    from tracekit.present import render

    def timed(n):
        out = io.StringIO()
        start = time.perf_counter()
        render.render(_rows(n), "table", out=out, rows=0, width=100)
        return time.perf_counter() - start, out.getvalue().splitlines()

    small, _ = timed(5_000)
    big, lines_ = timed(20_000)
    # 4x the rows: about 4x the time (the old table took 7.6 s for 2,000 rows and 101 s for 8,000).
    assert big < 2.0 and big < 10 * small + 0.2, (small, big)
    at = lines_[0].index("row_id") + len("row_id")
    ids = [int(line[:at].split()[-1]) for line in lines_[2:-1]]
    assert ids == list(range(20_000)) and lines_[-1] == "(20,000 rows)"


def test_table_output_writes_rows_before_reading_the_rest():
    """Memory does not grow with the result: batches after the fitted sample are written as they are read."""
    import io

    from tracekit.present import render

    out = io.StringIO()
    batches = [_rows(humanize.SAMPLE_ROWS, 0).to_batches()[0]] + [
        _rows(1_000, humanize.SAMPLE_ROWS + 1_000 * k).to_batches()[0] for k in range(5)
    ]
    seen = []

    def produce():
        for batch in batches:
            seen.append(out.getvalue().count("\n"))  # lines written before this batch is read
            yield batch

    reader = pa.RecordBatchReader.from_batches(batches[0].schema, produce())
    render.render(reader, "table", out=out, rows=0, width=100)
    assert seen == [0] + [2 + humanize.SAMPLE_ROWS + 1_000 * k for k in range(5)]
    # Units and widths come from the sample; later, larger values keep the sample's unit.
    shown = out.getvalue().splitlines()
    assert shown[0].split()[-1] == "gpu_µs" and shown[-2].split()[-1] == "6,999.0"
    assert out.getvalue().splitlines()[-1] == "(7,000 rows)"


def test_names_are_the_last_to_shrink_on_a_real_trace_at_100_columns(shared_dir, monkeypatch):
    """mi300_falconsai_vit_sdpa_modules (shared, real MI300X ViT): at 100 columns the old table cut the
    trace to 16 characters (mi300_fa…modules) and the module to nn.Modul…ntion_0 while it kept gpu_by_label,
    all zero."""
    monkeypatch.setenv("COLUMNS", "100")
    trace = str(shared_dir / "tracelens" / "mi300_falconsai_vit_sdpa_modules.json.gz")
    out = CliRunner().invoke(cli, ["stages", trace, "--calls", "3"])
    assert out.exit_code == 0, out.output
    text = out.stdout
    assert max(map(len, text.splitlines())) <= 100
    stages, calls = text.split("\n\n")[:2]  # (then where the calls came from)
    header = stages.splitlines()[1].split()
    assert header[:2] == ["trace", "stage"] and "gpu_by_label" not in header  # all zero: the first to go
    assert "mi300_falconsai_vit_sdpa_modules  fused_attention" in stages  # the trace's name whole
    assert "gpu_by_label" in stages.splitlines()[-1]  # and named as left out
    # The calls: the module whole, the trace shortened no further than MIN_NAME, derived figures gone first.
    assert "nn.Module: ViTSdpaAttention_0" in calls
    trace_cell = calls.splitlines()[3].split()[0]
    assert len(trace_cell) >= humanize.MIN_NAME and trace_cell.startswith("mi300_falcon")
    assert "tflops_per_s" in calls.splitlines()[-1]
    # One unit per column family: gpu and cpu durations side by side share theirs.
    wide = CliRunner().invoke(cli, ["stages", trace, "--calls", "3", "--wide"]).stdout.split("\n\n")[0]
    units = {h.split("_")[-1] for h in wide.splitlines()[1].split() if h in ("gpu_µs", "gpu_ms", "cpu_µs", "cpu_ms")}
    assert len(units) == 1


def test_columns_is_honoured_when_stdout_is_not_a_terminal(monkeypatch):
    import io

    from tracekit.cli import table_style

    for columns, width in (("60", 60), ("160", 160), ("", humanize.DEFAULT_WIDTH), ("wide", humanize.DEFAULT_WIDTH)):
        monkeypatch.setenv("COLUMNS", columns)
        assert humanize.terminal_width(io.StringIO()) == width
    monkeypatch.setenv("COLUMNS", "60")
    assert table_style(False, 40)["width"] == 60  # CliRunner's stdout is no terminal
    t = pa.table({"name": [f"kernel_{'x' * 90}_{i}" for i in range(3)], "gpu_ns": [1, 2, 3]})
    assert max(map(len, lines(humanize.table_text(t, width=60)))) <= 60


def test_prose_wraps_at_words_with_a_hanging_indent_and_keeps_units_and_commands_whole():
    text = "The GPU is idle 76.2 % of the span (503.051 ms of 660.551 ms); see tracekit query x /a/very/long/path"
    lines_ = humanize.prose(text, 30, " 1. ", "    ")
    assert lines_[0].startswith(" 1. The GPU") and all(line.startswith("    ") for line in lines_[1:])
    assert " ".join(line.strip() for line in lines_).replace("1. ", "", 1) == text
    assert not [line for line in lines_ if line.rstrip().endswith(("76.2", "503.051", "660.551"))]


@pytest.mark.slow
def test_report_prose_fits_and_rows_hints_stay_one_line(tmp_path, monkeypatch):
    """The report's findings wrap at 100 columns; each ``rows:`` hint is one line a user can paste."""
    monkeypatch.setenv("COLUMNS", "100")
    deep = tmp_path / ("a_long_folder_name_" * 4)
    deep.mkdir()
    trace = deep / "naive.json.gz"
    trace.write_bytes((SAMPLES / "naive.json.gz").read_bytes())
    out = CliRunner().invoke(cli, ["report", str(trace), "--all-findings"])
    assert out.exit_code == 0, out.output
    hints = [line for line in out.stdout.splitlines() if line.lstrip().startswith("rows: ")]
    assert hints and all(line.endswith(str(trace)) for line in hints)
    prose_lines = [line for line in out.stdout.splitlines() if line not in hints]
    assert max(map(len, prose_lines)) <= 100


@pytest.mark.slow  # the samples' diff --by kernel above is the every-run representative
def test_diff_by_kernel_across_vendors_is_readable_at_100_columns(shared_dir, monkeypatch):
    """h100 vs mi300 BERT (shared, real): the old table showed at::n…e::(anonymo…}>(…) and --wide 3,246-character
    lines; each name now shows what it is (its function, then the template arguments that tell it apart)."""
    monkeypatch.setenv("COLUMNS", "100")
    bert = shared_dir / "tracelens"
    res = CliRunner().invoke(
        cli,
        ["diff", str(bert / "h100_bert-small_sdpa-flash.json.gz"), str(bert / "mi300_bert-small_sdpa-flash.json.gz")]
        + ["--by", "kernel"],
    )
    assert res.exit_code == 0, res.output
    out = lines(res.stdout)
    assert max(map(len, out)) <= 100
    assert out[0].split()[-3:] == ["delta_µs", "delta_pct", "ratio"]
    at = out[0].index("change")
    shown = [line[:at].strip() for line in out[2:] if not line.startswith("(")]
    assert len(set(shown)) == len(shown) == 21
    assert "pytorch_flash::flash_fwd_kernel<…>" in shown and "attn_fwd" in shown
    assert "vectorized_layer_norm_kernel<BFloat16, float>" in shown  # whole: the namespace went first
    assert not [s for s in shown if s.startswith(("(anonymous", "at::n…", "void "))]


def test_thousands_of_names_alike_but_in_the_middle_stay_distinct_in_linear_time():
    """Names whose head and tail are alike collide when shortened; telling them apart compared every pair
    (7.2 s for 2,000 such names: the table format's superlinear case). Sorted neighbours suffice."""
    import time

    alike = [
        f"cudnn_generated_fort_native_sdpa_sm80_flash_{i:05d}_fprop_wmma_f16_knob_6_128x64x64_kernel0_0"
        for i in range(2_000)
    ]
    start = time.perf_counter()
    short = names.shorten_all(alike, 40)
    assert time.perf_counter() - start < 1.0
    assert len(set(short.values())) == 2_000 and all(len(s) <= 40 for s in short.values())
