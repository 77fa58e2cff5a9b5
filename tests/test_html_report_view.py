"""The HTML report's views on inputs whose truth is known by construction (stand-ins for the report's data,
no trace): evidence lists only the findings shown, with kernel names shortened and points in time relative;
traces a plot leaves out are named; tables of many traces fit the page."""

from types import SimpleNamespace

from tracekit.analysis import report_breakdown, report_render

KERNEL = (
    "void cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::GemmShape<128, 128, 32>, cutlass::gemm::GemmShape<64, "
    "64, 32>, float>(cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::GemmShape<128, 128, 32> >::Params)"
)
T0 = 1_733_500_000_000_000_000  # epoch-scale nanoseconds, as Kineto writes them


def _finding(fid: str, rows: list[dict]):
    return SimpleNamespace(
        id=fid, title=f"title {fid}", query=f"findings.{fid}", rows=rows, rows_total=len(rows), columns=list(rows[0])
    )


def _evidence_rows():
    return [
        {"name": KERNEL, "ts_ns": T0 + 2_500_000, "end_ns": T0 + 2_600_000, "dur_ns": 100_000},
        {"name": "ampere_sgemm_128x64_tn", "ts_ns": T0, "end_ns": T0 + 50_000, "dur_ns": 50_000},
    ]


def test_evidence_shows_short_kernel_names_and_times_relative_to_the_first_row():
    f = _finding("x", _evidence_rows())
    assert report_render.headers(f) == ["name", "ts (+µs)", "end (+µs)", "dur_µs"]
    cells = report_render._evidence_cells(f)
    assert cells[0] == [
        ("text", "GemmUniversal<GemmShape<…>, GemmShape<…>, float>"),
        ("num", "2,500.0"),
        ("num", "2,600.0"),
        ("num", "100.0"),
    ]
    assert cells[1][1:3] == [("num", "0.0"), ("num", "50.0")]


def test_evidence_lists_only_the_findings_what_stands_out_lists():
    shown, hidden = _finding("shown", _evidence_rows()), _finding("hidden", _evidence_rows())
    trace = SimpleNamespace(label="a", source="a.json.gz", findings=[shown, hidden])
    rep = SimpleNamespace(traces=[trace], all_findings=lambda: [(trace, shown)])
    html = "".join(report_render._evidence(rep))
    assert 'data-finding="shown"' in html and 'data-finding="hidden"' not in html
    # The exact value stays in the cell's title: the raw kernel name and the absolute timestamp.
    assert f'title="{T0}"' in html and "GemmUniversal&lt;cutlass::gemm::GemmShape" in html


def test_a_plot_names_every_trace_it_leaves_out():
    traces = [SimpleNamespace(label=name) for name in ("naive", "flex")]
    note = "".join(report_render._left_out(SimpleNamespace(traces=traces), traces[1:], "no ProfilerStep ranges"))
    assert note == ('<p class="muted left-out" data-traces="1">Not drawn: <b>flex</b> (no ProfilerStep ranges).</p>')
    assert report_render._left_out(SimpleNamespace(traces=traces), [], "why") == []


def test_tables_of_many_traces_wrap_to_fit_past_four():
    assert report_breakdown.table_class("headline", 4) == "headline"
    assert report_breakdown.table_class("headline", 5) == "headline many"
    assert "table.many { table-layout: fixed; width: 100%" in report_render.CSS
