"""The regression gate: ``tracekit diff A B --gate RULE``, a verdict per rule for CI.

A rule is ``METRIC>CHANGE`` (fail when B rises by more than CHANGE) or
``METRIC<CHANGE`` (fail when B's change falls below CHANGE, e.g.
``attention_calls.tflops_per_s<-5%``). CHANGE is a signed number with a unit:
``%`` (relative to A's mean), ``pt`` (percentage points, for shares and
``*_pct`` columns), ``ns``/``us``/``ms``/``s`` (a duration) or none (the
metric's own unit). METRIC is one of:

- ``STAGE.per_call`` -- a stage's GPU time per attention call (samples: the
  calls, the ``call_stages`` query); ``STAGE.per_step`` -- per profiler step
  (``step_stages``); ``STAGE.share`` -- its share of the step's GPU op time, in
  percent (per step; one sample per trace from ``stage_breakdown`` when the
  trace has no steps). STAGE is any attention stage, ``attention`` (every stage
  but ``other``) or ``other``.
- ``step_time`` -- the profiler step's duration on the CPU; ``step_gpu_time``
  -- its GPU busy time (samples: the steps, ``step_summary``).
- ``QUERY.COLUMN`` -- a numeric column of any named query: its rows are the samples.
- ``FINDING`` -- a finding's id (``queries/findings/``): how many rows it
  fires with (one number per side, no spread).

The samples of each side are compared with Welch's t-test (two-sided): the
metric is a mean (per call, per step), the two runs need not share a variance,
and it needs no table (the t distribution's CDF is computed here through the
regularized incomplete beta function, without scipy). A rank test
(Mann-Whitney U) was not chosen: with the three calls or steps a typical
profile holds per side, its smallest two-sided p is 0.1, so it could never
flag even a change far outside the spread. A change beyond the rule's limit
fails only when it is significant (p < alpha, 0.05 by default); one inside the
run-to-run spread passes, reported as not significant. With one sample on a
side there is no spread to test against: the change alone decides, and the
verdict says so. ``noise`` is the half-width of the change's 95 % confidence
interval, in the rule's unit.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tracekit.errors import TracekitError
from tracekit.present.values import format_unit

ALPHA = 0.05
TEST = "welch_t"
TEST_NAME = "Welch's t-test (two-sided)"
FORMATS = ("markdown", "json")
# ns per unit of a duration limit.
DURATIONS = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}
STAGE_FIELDS = ("per_call", "per_step", "share")
STEP_METRICS = {"step_time": "cpu_ns", "step_gpu_time": "busy_ns"}

_RULE = re.compile(
    r"^\s*(?P<metric>[A-Za-z_][\w.]*)\s*(?P<op>[<>])\s*(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*"
    r"(?P<unit>%|pt|ns|us|µs|ms|s)?\s*$"
)


class GateInputError(TracekitError):
    """A rule, a metric or a baseline the gate cannot use (exit status 2)."""


@dataclass(frozen=True)
class Rule:
    """One gate rule as written: METRIC, its direction (> or <), the limit and the limit's unit."""

    text: str
    metric: str
    op: str
    limit: float
    unit: str  # '%', 'pt', 'ns' (a duration, limit in ns) or '' (the metric's own unit)


def parse_rule(text: str) -> Rule:
    """A ``Rule`` from ``METRIC>CHANGE`` / ``METRIC<CHANGE``; a ``GateInputError`` names what is wrong."""
    m = _RULE.match(text)
    if not m:
        raise GateInputError(
            f"gate rule {text!r}: not of the form METRIC>CHANGE or METRIC<CHANGE "
            "(e.g. mask.per_call>+5%, step_time>+3%, attention.share>+2pt, step_gpu_time>+50us)"
        )
    unit = m["unit"] or ""
    limit = float(m["num"])
    if unit in DURATIONS:
        limit, unit = limit * DURATIONS[unit], "ns"
    return Rule(text.strip(), m["metric"], m["op"], limit, unit)


@dataclass
class Samples:
    """One side's samples of a metric."""

    values: list[float]
    unit: str  # ns, pct, count or num
    of: str  # calls, steps, rows, traces
    source: str  # the query the samples come from


def _stage_names() -> tuple[str, ...]:
    from tracekit.schema import stages

    return (*stages.names(), "attention", "other")


def _in_stage(stage: str | None, wanted: str) -> bool:
    if stage is None:
        return False
    return stage != "other" if wanted == "attention" else stage == wanted


def _rows(side, query: str, params: dict | None = None) -> list[dict]:
    return [r for r in side.trace.query_arrow(query, params or {}).to_pylist() if side._keep(r["trace"])]


def _grouped(rows: list[dict], key, stage: str) -> list[float]:
    """Per sample unit (``key`` of a row): the summed gpu_ns of ``stage``'s rows, 0 where it has none."""
    out: dict = {}
    for r in rows:
        out.setdefault(key(r), 0.0)
        if _in_stage(r["stage"], stage):
            out[key(r)] += float(r["gpu_ns"])
    return list(out.values())


def samples(side, metric: str) -> Samples:
    """The samples of ``metric`` on one side (a ``diff.Side``); a ``GateInputError`` when it has none."""
    name = side.name or "a side"
    head, _, tail = metric.partition(".")
    if metric in STEP_METRICS:
        rows = _rows(side, "step_summary")
        if not rows:
            raise GateInputError(f"{name}: no profiler steps (ProfilerStep#N): {metric} needs prof.step() calls")
        return Samples([float(r[STEP_METRICS[metric]]) for r in rows], "ns", "steps", "step_summary")
    if tail in STAGE_FIELDS and head in _stage_names():
        if tail == "per_call":
            rows = _rows(side, "call_stages")
            if not rows:
                raise GateInputError(f"{name}: no attention calls: {metric} has no samples")
            return Samples(_grouped(rows, lambda r: (r["trace"], r["call_id"]), head), "ns", "calls", "call_stages")
        rows = _rows(side, "step_stages")
        step = lambda r: (r["trace"], r["step_name"], r["step"])  # noqa: E731
        if tail == "per_step":
            if not rows:
                raise GateInputError(f"{name}: no profiler steps (ProfilerStep#N): {metric} needs prof.step() calls")
            return Samples(_grouped(rows, step, head), "ns", "steps", "step_stages")
        if rows:
            totals = {step(r): float(r["step_gpu_ns"]) for r in rows}
            stage_ns = dict(zip(totals, _grouped(rows, step, head), strict=True))
            step_shares = [100.0 * stage_ns[k] / t for k, t in totals.items() if t]
            if step_shares:
                return Samples(step_shares, "pct", "steps", "step_stages")
        shares: dict[str, float] = {}
        for r in _rows(side, "stage_breakdown"):
            shares.setdefault(r["trace"], 0.0)
            if _in_stage(r["stage"], head):
                shares[r["trace"]] += float(r["share_pct"] or 0)
        if not shares:
            raise GateInputError(f"{name}: no GPU ops: {metric} has no samples")
        return Samples(list(shares.values()), "pct", "traces", "stage_breakdown")
    if tail:
        return _query_column(side, head, tail, metric)
    return _finding(side, metric)


def _query_column(side, query: str, column: str, metric: str) -> Samples:
    from tracekit.library import queries

    named = queries.library().get(query) or next((q for q in queries.library().values() if q.name == query), None)
    if named is None:
        raise GateInputError(
            f"gate metric {metric!r}: {query!r} is neither a stage ({', '.join(_stage_names())}) with "
            f".{' / .'.join(STAGE_FIELDS)} nor a named query"
        )
    kinds = {c.name: c.type.upper() for c in named.columns}
    if column not in kinds:
        raise GateInputError(f"gate metric {metric!r}: query {named.name} has no column {column!r}")
    if not any(t in kinds[column] for t in ("INT", "DOUBLE", "FLOAT", "DECIMAL", "REAL", "NUMERIC")):
        raise GateInputError(f"gate metric {metric!r}: column {column} is {kinds[column]}, not a number")
    rows = side.trace.query_arrow(named.name).to_pylist()
    if "trace" in kinds:
        rows = [r for r in rows if side._keep(r["trace"])]
    values = [float(r[column]) for r in rows if r.get(column) is not None]
    if not values:
        raise GateInputError(f"{side.name or 'a side'}: query {named.name} has no rows with {column}: no samples")
    unit = "ns" if column.endswith("_ns") else "pct" if column.endswith("_pct") or column == "pct" else "num"
    return Samples(values, unit, "rows", named.name)


def _finding(side, metric: str) -> Samples:
    from tracekit.analysis import findings

    by_id = {rule.id: rule for rule in findings.rules()}
    if metric not in by_id:
        raise GateInputError(
            f"gate metric {metric!r}: not step_time, step_gpu_time, STAGE.{'|'.join(STAGE_FIELDS)}, "
            f"QUERY.COLUMN or a finding ({', '.join(by_id)})"
        )
    query = by_id[metric].query
    rows = side.trace.query_arrow(query.id).to_pylist()
    fired = [r for r in rows if side._keep(r["trace"])] if any(c.name == "trace" for c in query.columns) else rows
    return Samples([float(len(fired))], "count", "traces", query.name)


# -- Welch's t-test, without scipy ---------------------------------------------------------------------------


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom."""
    if math.isinf(t):
        return 0.0
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def t_quantile(q: float, df: float) -> float:
    """The t value with P(T <= t) = q (q > 0.5), by bisection on the CDF."""
    lo, hi = 0.0, 1e6
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if 1.0 - t_two_sided_p(mid, df) / 2.0 < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def _mean_var(values: list[float]) -> tuple[float, float]:
    n = len(values)
    mean = math.fsum(values) / n
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return mean, var


def welch(a: list[float], b: list[float]) -> tuple[float | None, float | None, float | None]:
    """``(p, degrees of freedom, standard error of mean(b) - mean(a))``; all None with one sample on a side."""
    if len(a) < 2 or len(b) < 2:
        return None, None, None
    (ma, va), (mb, vb) = _mean_var(a), _mean_var(b)
    sa, sb = va / len(a), vb / len(b)
    se = math.sqrt(sa + sb)
    if se == 0.0:
        return (1.0 if ma == mb else 0.0), float(len(a) + len(b) - 2), 0.0
    df = (sa + sb) ** 2 / ((sa * sa) / (len(a) - 1) + (sb * sb) / (len(b) - 1)) if sa or sb else 1.0
    return t_two_sided_p((mb - ma) / se, df), df, se


# -- verdicts ---------------------------------------------------------------------------------------------


@dataclass
class Verdict:
    """One rule's verdict: pass or fail, the measured change in the rule's unit and its noise."""

    rule: str
    metric: str
    status: str  # pass or fail
    significant: bool | None  # None: one sample on a side, no spread to test against
    change: float | None  # in the rule's unit (inf: A's mean is 0 and a % was asked)
    change_unit: str
    limit: float
    noise: float | None  # half-width of the change's 95 % confidence interval, in the rule's unit
    p_value: float | None
    beyond_limit: bool
    a_mean: float
    b_mean: float
    a_sd: float | None
    b_sd: float | None
    a_n: int
    b_n: int
    unit: str  # the samples' unit
    samples_of: str
    source: str
    note: str = ""
    test: str = TEST


def _in_rule_unit(delta: float, a_mean: float, rule: Rule) -> float:
    if rule.unit == "%":
        if a_mean == 0:
            return 0.0 if delta == 0 else math.copysign(math.inf, delta)
        return 100.0 * delta / abs(a_mean)
    return delta


def judge(rule: Rule, a: Samples, b: Samples, alpha: float = ALPHA) -> Verdict:
    """The verdict of ``rule`` on the two sides' samples."""
    if rule.unit == "pt" and a.unit != "pct":
        raise GateInputError(f"gate rule {rule.text!r}: pt (percentage points) needs a share or a *_pct column")
    if rule.unit == "ns" and a.unit != "ns":
        raise GateInputError(f"gate rule {rule.text!r}: a duration limit needs a time metric (ns)")
    (ma, va), (mb, vb) = _mean_var(a.values), _mean_var(b.values)
    delta = mb - ma
    change = _in_rule_unit(delta, ma, rule)
    p, df, se = welch(a.values, b.values)
    noise = None
    if se is not None and df is not None:
        half = t_quantile(0.975, df) * se if se else 0.0
        noise = (100.0 * half / abs(ma) if ma else math.inf) if rule.unit == "%" else half
    exceeds = change > rule.limit if rule.op == ">" else change < rule.limit
    significant = None if p is None else p < alpha
    if not exceeds:
        status, note = "pass", "within the limit"
    elif significant is None:
        status, note = "fail", "one sample on a side: no spread to test against, the change alone decides"
    elif significant:
        status, note = "fail", f"beyond the limit and significant ({TEST_NAME}, p < {alpha:g})"
    else:
        status, note = "pass", f"beyond the limit but not significant: inside the run-to-run spread (p >= {alpha:g})"
    return Verdict(
        rule=rule.text,
        metric=rule.metric,
        status=status,
        significant=significant,
        change=change,
        change_unit=rule.unit or a.unit,
        limit=rule.limit,
        noise=noise,
        p_value=p,
        beyond_limit=exceeds,
        a_mean=ma,
        b_mean=mb,
        a_sd=math.sqrt(va) if len(a.values) > 1 else None,
        b_sd=math.sqrt(vb) if len(b.values) > 1 else None,
        a_n=len(a.values),
        b_n=len(b.values),
        unit=a.unit,
        samples_of=a.of if a.of == b.of else f"{a.of}/{b.of}",
        source=a.source,
        note=note,
    )


@dataclass
class GateResult:
    """Every rule's verdict, and what was compared."""

    a: str
    b: str
    verdicts: list[Verdict]
    alpha: float = ALPHA
    baseline: dict = field(default_factory=dict)  # the baseline's manifest, when A came from --baseline

    @property
    def failed(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.status == "fail"]

    @property
    def exit_code(self) -> int:
        """0: every rule passes; 1: a regression."""
        return 1 if self.failed else 0

    def to_json(self) -> str:
        def plain(value):
            return None if isinstance(value, float) and not math.isfinite(value) else value

        rules = [{k: plain(v) for k, v in asdict(verdict).items()} for verdict in self.verdicts]
        out: dict[str, Any] = {
            "verdict": "fail" if self.failed else "pass",
            "exit_code": self.exit_code,
            "a": self.a,
            "b": self.b,
            "test": TEST,
            "alpha": self.alpha,
            "rules": rules,
        }
        if self.baseline:
            out["baseline"] = self.baseline
        return json.dumps(out, indent=2) + "\n"

    def to_markdown(self) -> str:
        head = "FAIL" if self.failed else "PASS"
        count = (
            f"{len(self.failed)} of {len(self.verdicts)} rules failed"
            if self.failed
            else (f"{len(self.verdicts)} rules passed")
        )
        lines = [
            f"### tracekit gate: {head} ({count})",
            "",
            f"A (baseline): `{self.a}` · B: `{self.b}`",
            "",
            "| verdict | rule | A | B | change | noise (95% CI) | p | samples |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for v in self.verdicts:
            verdict = "**fail**" if v.status == "fail" else "pass (n.s.)" if v.beyond_limit else "pass"
            lines.append(
                "| "
                + " | ".join(
                    [
                        verdict,
                        f"`{v.rule}`",
                        _value_text(v.a_mean, v.unit),
                        _value_text(v.b_mean, v.unit),
                        _change_text(v.change, v.change_unit),
                        "–" if v.noise is None else "±" + _change_text(v.noise, v.change_unit).lstrip("+"),
                        "–" if v.p_value is None else f"{v.p_value:.3g}",
                        f"{v.a_n} / {v.b_n} {v.samples_of}",
                    ]
                )
                + " |"
            )
        lines += [
            "",
            f"Samples are the {', '.join(sorted({v.samples_of for v in self.verdicts}))} of each side; "
            f"{TEST_NAME}, α = {self.alpha:g}: a change beyond its limit fails only when it is significant, "
            "one inside the run-to-run spread passes as not significant (n.s.); with one sample on a side "
            "the change alone decides.",
        ]
        return "\n".join(lines) + "\n"


def _value_text(value: float, unit: str) -> str:
    if unit == "count" or (unit == "num" and float(value).is_integer()):
        return f"{value:,.0f}"
    return format_unit(value, unit)


def _change_text(value: float | None, unit: str) -> str:
    if value is None:
        return "–"
    if math.isinf(value):
        return "new" if value > 0 else "gone"
    if unit == "%":
        return f"{value:+.2f} %"
    if unit in ("pt", "pct"):
        return f"{value:+.2f} pt"
    if unit == "ns":
        sign = "+" if value >= 0 else "-"
        return sign + format_unit(abs(value), "ns")
    return f"{value:+,.4g}"


def evaluate(a, b, rules: list[str], alpha: float = ALPHA) -> GateResult:
    """Every rule's verdict for side ``b`` against the baseline side ``a`` (``diff.Side`` objects)."""
    parsed = [parse_rule(text) for text in rules]
    if not parsed:
        raise GateInputError("no gate rule: give --gate METRIC>CHANGE at least once")
    if not 0 < alpha < 1:
        raise GateInputError(f"alpha {alpha}: must lie between 0 and 1")
    verdicts = [judge(rule, samples(a, rule.metric), samples(b, rule.metric), alpha) for rule in parsed]
    return GateResult(a.name, b.name, verdicts, alpha)


# -- the baseline folder ----------------------------------------------------------------------------------

MANIFEST = "baseline.json"
TRACE_DIR = "trace"


def baseline_source(folder: Path) -> tuple[Path, dict] | None:
    """The stored last good run in ``folder`` and its manifest; None when the folder holds none yet."""
    manifest = folder / MANIFEST
    if not manifest.exists():
        return None
    try:
        meta = json.loads(manifest.read_text())
        stored = folder / TRACE_DIR / meta["source"]
    except (ValueError, KeyError, TypeError) as exc:
        raise GateInputError(f"{manifest}: not a tracekit baseline manifest ({exc})") from None
    if not stored.exists():
        raise GateInputError(f"{manifest}: its run {stored} is missing")
    return stored, meta


def store_baseline(folder: Path, source: str, result: GateResult | None, rules: list[str]) -> dict:
    """Make ``source`` (a trace file, a folder of them or a .duckdb) the last good run in ``folder``.

    The run is copied under ``folder/trace/`` and described by ``folder/baseline.json``; the new
    copy is staged beside the old one and swapped in by renames, so an interrupted update leaves the
    previous baseline whole."""
    from tracekit import __version__

    src = Path(source)
    if not src.exists():
        raise GateInputError(f"{source}: no such file or folder")
    folder.mkdir(parents=True, exist_ok=True)
    stage = folder / ".trace.new"
    old = folder / ".trace.old"
    for leftover in (stage, old):
        if leftover.exists():
            shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
    stage.mkdir()
    if src.is_dir():
        shutil.copytree(src, stage / src.name)
    else:
        shutil.copy2(src, stage / src.name)
    meta = {
        "format": 1,
        "source": src.name,
        "stored_from": str(src.resolve()),
        "stored_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "tracekit": __version__,
        "rules": list(rules),
        "verdict": None if result is None else ("fail" if result.failed else "pass"),
        "replaced": None,
    }
    try:
        current = baseline_source(folder)
    except GateInputError:
        current = None  # a broken baseline is replaced whole
    if current is not None:
        meta["replaced"] = {k: current[1].get(k) for k in ("source", "stored_from", "stored_at")}
    trace_dir = folder / TRACE_DIR
    if trace_dir.exists():
        trace_dir.rename(old)
    stage.rename(trace_dir)
    tmp = folder / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(meta, indent=2) + "\n")
    tmp.replace(folder / MANIFEST)
    if old.exists():
        shutil.rmtree(old)
    return meta
