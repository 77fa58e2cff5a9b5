"""Module scopes as attribution evidence: ``nn.Module`` and Python frames.

Traces recorded with ``with_modules`` (or ``with_stack``) carry
``python_function`` events such as ``nn.Module: Qwen3Attention_0`` or
``modeling_t5.py(236): compute_bias``. ``rule_module_stages`` maps the module
class (or the function name) to an attention call and/or a stage for the
scope's subtree. A CPU slice belongs to a scope when it lies inside it on the
same thread (time containment, with the link step's overhang), so a GPU op
belongs to a scope when its launching runtime call does: the projection rule
the labels use.

This module builds the working tables the attribution reads:

- ``_module_match``: the first matching rule per distinct frame name;
- ``_scope_marks``: each matched scope as a mark (``kind = 'module'``) with a
  position on the link step's axis (just before the first slice it contains,
  inner scopes after outer ones), so it orders with the label and op marks;
- ``_scope_pairs``: (slice, scope) for every CPU slice inside a scope.
"""

from __future__ import annotations

import duckdb

from tracekit.common import sqltext
from tracekit.model import link

# The class of an ``nn.Module: <Class>_<n>`` scope; the function of a ``file.py(42): func`` frame.
MODULE_CLASS = r"^nn\.Module: (.+?)(_[0-9]+)?$"
FUNCTION_NAME = r"^.+\([0-9]+\): ([A-Za-z_][A-Za-z0-9_]*)$"


def subject(name: str) -> str:
    """SQL: the string a rule's pattern sees for the frame ``name`` (NULL: no rule applies)."""
    return (
        f"CASE WHEN {name} LIKE 'nn.Module: %' THEN regexp_extract({name}, '{MODULE_CLASS}', 1) "
        f"ELSE nullif(regexp_extract({name}, '{FUNCTION_NAME}', 1), '') END"
    )


def frame_kind(name: str) -> str:
    """SQL: ``module`` for an nn.Module scope, ``function`` for any other Python frame."""
    return f"CASE WHEN {name} LIKE 'nn.Module: %' THEN 'module' ELSE 'function' END"


def match(con: duckdb.DuckDBPyConnection) -> None:
    """``_module_match``: the first matching rule (lowest rule_order) per distinct frame name."""
    sqltext.first_match(
        con,
        "_module_match",
        f"SELECT name, {frame_kind('name')} AS frame FROM (SELECT DISTINCT name FROM python_functions)",
        "rule_module_stages",
        "stage := nullif(r.stage, ''), is_call := r.call = 'yes', impl := NULL::VARCHAR, context := r.context, "
        "scope := 'module', causal_arg := NULL::INTEGER",
        subject=subject("n.name"),
        on="AND r.frame = n.frame",
    )


def scopes(con: duckdb.DuckDBPyConnection) -> None:
    """``_scope_marks`` and ``_scope_pairs`` (needs ``_module_match`` and the link step's ``_cpu``)."""
    # Rows that neither start a call nor name a stage (exclusions) only stop
    # broader rows from matching; they need no scope.
    con.execute(
        """CREATE OR REPLACE TEMP TABLE _scope AS
           SELECT f.id, f.trace_id, f.pid, f.tid, f.ts_ns, f.dur_ns, f.end_ns, m.m
           FROM python_functions f JOIN _module_match m USING (name)
           WHERE m.m.is_call OR m.m.stage IS NOT NULL"""
    )
    # Each thread's stretch of the link step's axis: k0 = base + ts_ns (none without scopes: the
    # usual trace, which then pays nothing for this layer).
    con.execute(
        """CREATE OR REPLACE TEMP TABLE _scope_lane AS
           WITH l AS (SELECT lane, any_value(id) AS id, any_value(k0 - ts_ns) AS base FROM _cpu
                      WHERE EXISTS (SELECT 1 FROM _scope) GROUP BY lane)
           SELECT l.lane, l.base, s.trace_id, s.pid, s.tid FROM l JOIN cpu_slices s USING (id)"""
    )
    con.execute(
        """CREATE OR REPLACE TEMP TABLE _scope_k AS
           SELECT s.*, l.lane, l.base + s.ts_ns AS s0, l.base + s.end_ns AS s1
           FROM _scope s JOIN _scope_lane l ON l.trace_id = s.trace_id AND l.pid IS NOT DISTINCT FROM s.pid
                                           AND l.tid IS NOT DISTINCT FROM s.tid"""
    )
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _scope_pairs AS
            SELECT x, key AS sid, pos FROM ({link.inside("_scope_k", "id", "s0", "s1")})"""
    )
    # A scope sits just before the first slice it contains; scopes sharing
    # that slice nest by start time (outer first, then the longer).
    con.execute(
        """CREATE OR REPLACE TEMP TABLE _scope_marks AS
           WITH first AS (SELECT sid AS id, min(pos) AS p FROM _scope_pairs GROUP BY sid)
           SELECT s.id, s.id AS mkey, 'module' AS kind,
                  (f.p - 1 + row_number() OVER (PARTITION BY f.p ORDER BY s.ts_ns, s.dur_ns DESC, s.id)
                       / (count(*) OVER (PARTITION BY f.p) + 1))::DOUBLE AS pos,
                  s.m.stage, s.m.is_call, s.m.impl, s.m.context, s.m.scope, s.m.causal_arg, s.m.rule,
                  s.trace_id, s.ts_ns, s.end_ns
           FROM _scope_k s JOIN first f USING (id)"""
    )
    for t in ("_scope", "_scope_lane", "_scope_k"):
        con.execute(f"DROP TABLE {t}")
