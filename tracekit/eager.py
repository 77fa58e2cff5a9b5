"""Eager attention found by op order, where no label, module or op marks a call.

``softmax(Q @ K^T) @ V`` written out in Python leaves, on one thread, a
matmul, a few elementwise ops (scale, mask, position bias), a softmax, maybe
a dropout and a cast, and a second matmul. This module finds that pattern
among sibling ops (same parent, same thread) around every softmax that no
call contains, and checks the shapes (``Input Dims``): the first product's
output ``[..., Sq, Skv]`` is the softmax's input and the second product's
left operand, and the second product's right operand has ``Skv`` rows. A
classifier's softmax has no such products around it and stays ``other``.
Without recorded shapes only the tightest pattern counts (at most
``UNSHAPED_GAP`` ops between the products and the softmax).

Each pattern becomes a call mark (``kind = 'eager'``, impl ``eager``) whose
scope is the time from the first product's start to the second product's end
on that thread; inside it the op rules give the stages as in any call. The
call's id is the first product's op id (its ``mkey`` is the negated id, so it
does not collide with the op's own mark).
"""

from __future__ import annotations

import duckdb

from . import link

SOFTMAX = r"^aten::(_?softmax|_safe_softmax)$"
# baddbmm: BLOOM's scores (alibi + Q @ K^T, its operands after the bias); einsum: 'bhid,bhjd->bhij'
# (its dims are a tensor list: shape checks do not apply, the unshaped gap does).
PRODUCT = r"^aten::(bmm|matmul|baddbmm|einsum)$"
# Sibling ops allowed between the QK^T product and the softmax (scale, mask,
# position bias, casts) and between the softmax and the PV product (dropout, casts).
MAX_GAP_BEFORE = 32
MAX_GAP_AFTER = 8
UNSHAPED_GAP = 3
RULE = "eager: matmul -> softmax -> matmul"


def _dim(dims: str, arg: int, index: int) -> str:
    """SQL: dimension ``index`` (negative: from the end) of argument ``arg`` of an Input Dims JSON."""
    path = f"$[{arg}][#{index}]" if index < 0 else f"$[{arg}][{index}]"
    return f"TRY_CAST(json_extract_string({dims}, '{path}') AS BIGINT)"


def _operand_dim(op: str, operand: int, index: int) -> str:
    """SQL: dimension ``index`` of the product ``op``'s ``operand`` (0: left, 1: right); baddbmm's
    operands follow its bias, an einsum's are a list (NULL: not compared)."""
    return f"""CASE WHEN {op}.name = 'aten::baddbmm' THEN {_dim(f"{op}.input_dims", operand + 1, index)}
                    WHEN {op}.name = 'aten::einsum' THEN NULL
                    ELSE {_dim(f"{op}.input_dims", operand, index)} END"""


def find(con: duckdb.DuckDBPyConnection) -> None:
    """Create ``_eager_marks`` and ``_eager_pairs`` (needs ``_cpu``, ``_marked`` and ``_xm``)."""
    # Outermost softmax ops outside every call.
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _eager_sm AS
            SELECT s.id, s.parent_id, c.lane, c.pos, s.input_dims
            FROM cpu_slices s JOIN _cpu c USING (id)
            LEFT JOIN cpu_slices p ON p.id = s.parent_id
            -- The pattern is matched per distinct op name, not per row.
            WHERE s.kind = 'cpu_op'
              AND s.name IN (SELECT name FROM (SELECT DISTINCT name FROM cpu_slices WHERE kind = 'cpu_op')
                             WHERE regexp_matches(name, '{SOFTMAX}'))
              AND NOT coalesce(regexp_matches(p.name, '{SOFTMAX}'), false)
              AND s.id NOT IN (SELECT x.x FROM _xm x JOIN _marked m ON m.mkey = x.mkey WHERE m.is_call)"""
    )
    if not con.execute("SELECT count(*) FROM _eager_sm").fetchone()[0]:  # type: ignore[index]
        _empty(con)
        return
    # The softmaxes' siblings, numbered in order.
    con.execute(
        """CREATE OR REPLACE TEMP TABLE _eager_sib AS
           SELECT s.id, s.name, s.input_dims, s.ts_ns, s.end_ns, c.lane, c.pos, c.k0, c.k1, s.parent_id,
                  row_number() OVER (PARTITION BY c.lane, s.parent_id ORDER BY c.pos) AS i
           FROM cpu_slices s JOIN _cpu c USING (id)
           WHERE s.kind = 'cpu_op'
             AND (c.lane, coalesce(s.parent_id, -1)) IN (SELECT lane, coalesce(parent_id, -1) FROM _eager_sm)"""
    )
    sm_last = _dim("c.input_dims", 0, -1)
    sm_rows = _dim("c.input_dims", 0, -2)
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _eager_found AS
            WITH sm AS (
                SELECT e.id, e.lane, b.i, e.input_dims, e.parent_id FROM _eager_sm e JOIN _eager_sib b USING (id)
            ),
            qk AS (  -- the nearest product before the softmax, with no other softmax between
                SELECT sm.id AS sm_id, arg_max(b.id, b.i) AS qk_id, max(b.i) AS qk_i
                FROM sm JOIN _eager_sib b ON b.lane = sm.lane AND b.parent_id IS NOT DISTINCT FROM sm.parent_id
                WHERE sm.i - b.i BETWEEN 1 AND {MAX_GAP_BEFORE + 1} AND regexp_matches(b.name, '{PRODUCT}')
                GROUP BY sm.id
            ),
            pv AS (  -- the nearest product after it
                SELECT sm.id AS sm_id, arg_min(b.id, b.i) AS pv_id, min(b.i) AS pv_i
                FROM sm JOIN _eager_sib b ON b.lane = sm.lane AND b.parent_id IS NOT DISTINCT FROM sm.parent_id
                WHERE b.i - sm.i BETWEEN 1 AND {MAX_GAP_AFTER + 1} AND regexp_matches(b.name, '{PRODUCT}')
                GROUP BY sm.id
            ),
            cand AS (
                SELECT sm.id AS sm_id, sm.i AS sm_i, sm.input_dims, qk.qk_id, qk.qk_i, pv.pv_id, pv.pv_i
                FROM sm JOIN qk ON qk.sm_id = sm.id JOIN pv ON pv.sm_id = sm.id
                -- (differences, not comparisons, so DuckDB plans a hash join: see attribution._gpu_label)
                WHERE NOT EXISTS (SELECT 1 FROM sm o WHERE o.lane = sm.lane
                                  AND o.parent_id IS NOT DISTINCT FROM sm.parent_id
                                  AND o.i - qk.qk_i > 0 AND pv.pv_i - o.i > 0 AND o.id <> sm.id)
            )
            SELECT c.*, a.name AS qk_name, z.name AS pv_name, n.name AS sm_name,
                   a.lane, a.pos AS qk_pos, a.k0, z.k1, a.ts_ns, z.end_ns,
                   {sm_last} AS skv, {sm_rows} AS sq,
                   {_operand_dim("a", 0, -2)} AS a_rows, {_operand_dim("a", 0, -1)} AS a_inner,
                   {_operand_dim("a", 1, -2)} AS b_inner, {_operand_dim("a", 1, -1)} AS b_cols,
                   {_operand_dim("z", 0, -2)} AS p_rows, {_operand_dim("z", 0, -1)} AS p_inner,
                   {_operand_dim("z", 1, -2)} AS v_rows
            FROM cand c JOIN _eager_sib a ON a.id = c.qk_id JOIN _eager_sib z ON z.id = c.pv_id
            JOIN _eager_sib n ON n.id = c.sm_id"""
    )
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _eager_marks AS
            SELECT qk_id AS id, -qk_id AS mkey, 'eager' AS kind, (qk_pos - 0.5)::DOUBLE AS pos,
                   NULL::VARCHAR AS stage, true AS is_call, 'eager' AS impl, 'any' AS context, 'outer' AS scope,
                   NULL::INTEGER AS causal_arg, '{RULE}' AS rule,
                   qk_name || ' > ' || sm_name || ' > ' || pv_name AS op, lane, k0, k1, ts_ns, end_ns
            FROM _eager_found
            WHERE CASE WHEN skv IS NULL OR a_rows IS NULL OR p_rows IS NULL
                       THEN sm_i - qk_i - 1 <= {UNSHAPED_GAP} AND pv_i - sm_i - 1 <= {UNSHAPED_GAP}
                       ELSE a_inner = b_inner AND b_cols = skv AND a_rows = sq
                            AND p_inner = skv AND p_rows = sq AND v_rows = skv END"""
    )
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _eager_pairs AS
            SELECT x, key AS mkey FROM ({link.inside("_eager_marks", "mkey")})"""
    )
    for t in ("_eager_sm", "_eager_sib", "_eager_found"):
        con.execute(f"DROP TABLE {t}")


def _empty(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        """CREATE OR REPLACE TEMP TABLE _eager_marks (
               id BIGINT, mkey BIGINT, kind VARCHAR, pos DOUBLE, stage VARCHAR, is_call BOOLEAN, impl VARCHAR,
               context VARCHAR, scope VARCHAR, causal_arg INTEGER, rule VARCHAR, op VARCHAR, lane BIGINT,
               k0 BIGINT, k1 BIGINT, ts_ns BIGINT, end_ns BIGINT)"""
    )
    con.execute("CREATE OR REPLACE TEMP TABLE _eager_pairs (x BIGINT, mkey BIGINT)")
    con.execute("DROP TABLE _eager_sm")
