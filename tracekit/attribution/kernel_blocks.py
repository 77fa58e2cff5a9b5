"""Attention blocks found in a GPU stream's kernel sequence, where no CPU op tells them.

A CUDA/HIP-graph replay (one ``hipGraphLaunch`` owns a decode step's hundreds of kernels) or a
compiled region (``Torch-Compiled Region`` launches every kernel of the graph) leaves the kernel
name as the only fact about a GPU op: the attention kernel is found by name (a call of its own,
source ``kernel``), and the projections, q/k norms and copies around it were ``other``. On one
stream, an attention layer runs in a fixed order, and this module reads it from the sequence:

    ... GEMM (qkv_proj) [norms, rotary, KV-cache writes, copies] ATTENTION [copies] GEMM (out_proj) [all-reduce]

For each run of adjacent attention kernels of one implementation with no CPU call (a paged
kernel and its split-KV reduction are one call), going back: the non-GEMM kernels up to the
nearest GEMM, at most ``PRE_REACH`` of them, then that GEMM and the GEMMs right before it
(separate q, k and v projections; at most ``QKV_GEMMS``); going forward: at most ``POST_REACH``
kernels up to the next GEMM, that GEMM, and a tensor-parallel all-reduce right after it.
Projections that other kernels keep apart (inductor fuses a projection's bias add into the next
q/k-norm kernel) are found further back: GEMMs of the adjacent group's own kernel names, up to a
norm kernel (``EXT_REACH``). No GEMM within reach: no widening on that side (a call is never
widened over kernels it cannot bound). The walk stops at
a kernel some other layer decided (a label, module, op or another call), a copy or memset, a
collective, the previous call's block and a backward attention kernel's run (backward runs the
layer in reverse: its GEMMs around the kernel are the other projections' gradients).

The same walk widens a CPU call that holds an attention kernel and no projection, over kernels of
graph replays only: vLLM's piecewise CUDA graphs run the attention op eagerly between two replays
that hold the QKV GEMM before it and the o_proj GEMM after it. Kernels that ops launched are the
op layers' (the block search by ops, ``eager``), so a plain eager trace is not read this way.

A GEMM is a kernel whose ``rule_op_categories`` kernel category is ``GEMM`` (a user folder's
rows first, as in ``op_summary``). The kernels between are: their kernel rule's stage where it
names one (``rope``, ``kv_cache``, ``layout``, and a ``call``-context rule now that they are in a
call), a norm kernel before the core ``qk_norm``, else ``layout``. Decided here: source
``sequence``; by their kernel rule, still ``kernel``.
"""

from __future__ import annotations

import duckdb

from tracekit.attribution.eager import TP_REDUCTION
from tracekit.common import sqltext

PRE_REACH = 12  # non-GEMM kernels between the QKV GEMM and the attention kernel (SGLang's Qwen3 decode: 6)
POST_REACH = 4  # kernels between the attention kernel and the output GEMM
EXT_REACH = 16  # kernels before the adjacent QKV group that may hold its earlier projections (FLUX: 13)
QKV_GEMMS = 6  # consecutive GEMMs before the middle: q, k, v (and a joint block's second q, k, v)
SOURCE = "sequence"
BACKWARD_KERNEL = r"(?i)bwd|backward|bprop|dgrad|wgrad"
# Kernel-rule stages that say only what a kernel computes: its side of the core says which stage.
_POSITIONAL = ("proj", "matmul", "norm")


def find(con: duckdb.DuckDBPyConnection, decisions: str) -> None:
    """Create ``_kblock`` (id, call_id, stage, source, rule, attention_kernel): the GPU ops that
    the kernel-sequence blocks of ``decisions`` (rows of every GPU op: id, stage, source,
    call_id) take in, and the attention kernels whose call merges into the run's first."""
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _kblock (id BIGINT, call_id BIGINT, stage VARCHAR, source VARCHAR, "
        "rule VARCHAR, attention_kernel BOOLEAN)"
    )
    # CPU calls with an attention kernel and no projection on the GPU (vLLM's piecewise CUDA graphs:
    # the attention op runs eagerly between graph replays that hold the projections).
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _kcpu AS
            SELECT call_id FROM {decisions} WHERE call_id IS NOT NULL GROUP BY call_id
            HAVING bool_or(attention_kernel) AND NOT bool_or(stage IN ('qkv_proj', 'out_proj'))
               AND NOT bool_or(source = 'kernel' AND call_id = id)"""
    )
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _kstreams AS
            SELECT DISTINCT g.trace_id, g.device, g.stream
            FROM {decisions} d JOIN gpu_ops g USING (id)
            WHERE d.source = 'kernel' AND d.call_id = d.id
            UNION
            (SELECT DISTINCT g.trace_id, g.device, g.stream
             FROM {decisions} d JOIN gpu_ops g USING (id) WHERE d.call_id IN (SELECT call_id FROM _kcpu)
             INTERSECT
             SELECT DISTINCT trace_id, device, stream FROM gpu_ops WHERE via_graph)"""
    )
    if not con.execute("SELECT count(*) FROM _kstreams").fetchall()[0][0]:
        for t in ("_kstreams", "_kcpu"):
            con.execute(f"DROP TABLE {t}")
        return
    sqltext.first_match(
        con,
        "_kcat",
        "SELECT DISTINCT name FROM gpu_ops JOIN _kstreams USING (trace_id, device, stream)",
        "rule_op_categories",
        "category := r.category",
        on="AND r.applies_to = 'kernel'",
    )
    # Per distinct name, not per kernel: a regex over 275k long kernel names took 1.9 s.
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _kname AS
            SELECT n.name, row_number() OVER () AS name_id, c.m.category AS category,
                   regexp_matches(n.name, {sqltext.literal(TP_REDUCTION)}) AS reduction,
                   regexp_matches(n.name, {sqltext.literal(BACKWARD_KERNEL)}) AS backward
            FROM (SELECT DISTINCT name FROM gpu_ops JOIN _kstreams USING (trace_id, device, stream)) n
            LEFT JOIN _kcat c USING (name)"""
    )
    positional = sqltext.in_list(_POSITIONAL)
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _kseq AS
        -- The order numbered over narrow rows (id, stream, time), the rest joined by id: a window
        -- that carries kernel names sorts them too (x492 SGLang decode: 1.14 -> 0.36 s).
        WITH o AS (
            SELECT g.id, g.trace_id, g.device, g.stream,
                   row_number() OVER (PARTITION BY g.trace_id, g.device, g.stream ORDER BY g.ts_ns, g.id) AS k
            FROM gpu_ops g JOIN _kstreams USING (trace_id, device, stream)
        ),
        s AS (
            SELECT o.*,
                   d.source = 'kernel' AND d.call_id = d.id AS own, d.kernel_impl AS impl,
                   d.source IN ('none', 'kernel') AND d.call_id IS NULL
                       AND g.kind = 'kernel' AND coalesce(c.category, '') NOT IN ('communication', 'memcpy') AS free,
                   coalesce(c.category = 'GEMM', false) AS gemm,
                   coalesce(c.category = 'norm', false) AS norm,
                   g.kind = 'kernel' AND c.reduction AND d.source = 'none' AND d.call_id IS NULL AS reduction,
                   c.backward, c.name_id, km.m AS km, d.call_id AS dcall, g.via_graph
            FROM o JOIN gpu_ops g USING (id)
            JOIN {decisions} d USING (id)
            JOIN _kname c ON c.name = g.name
            LEFT JOIN _kernel_match km ON km.name = g.name
        )
        SELECT *, own OR free AS open, free AND gemm AS free_gemm,
               own OR (free AND via_graph) AS gopen, free AND gemm AND via_graph AS gfree_gemm FROM s
        """
    )
    # The graph-only bounds (over gopen / gfree_gemm) cost five more window aggregates: only when a
    # CPU call may use them.
    graph = con.execute("SELECT count(*) FROM _kcpu").fetchall()[0][0] > 0
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _kruns AS
        -- g: a CPU call's kernels, which take in only kernels of graph replays.
        WITH runs AS (
            SELECT trace_id, device, stream, min(k) AS k0, max(k) AS k1, arg_min(id, k) AS call_id,
                   bool_or(backward) AS backward, false AS g
            FROM (SELECT *, k - row_number() OVER (PARTITION BY trace_id, device, stream, impl ORDER BY k) AS grp
                  FROM _kseq WHERE own)
            GROUP BY trace_id, device, stream, impl, grp
            UNION ALL
            SELECT trace_id, device, stream, min(k), max(k), dcall, bool_or(backward), true
            FROM _kseq WHERE dcall IN (SELECT call_id FROM _kcpu)
            GROUP BY trace_id, device, stream, dcall
        ),
        -- Per kernel: the nearest closed kernel and free GEMM on each side (closed: not open).
        w AS (
            SELECT trace_id, device, stream, k,
                   {_nearest("", "open", "free_gemm")},
                   {_nearest("g_", "gopen", "gfree_gemm") if graph else _nearest("g_", None, None)}
            FROM _kseq
            WINDOW up AS (PARTITION BY trace_id, device, stream ORDER BY k ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
                   down AS (PARTITION BY trace_id, device, stream ORDER BY k ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING)
        ),
        bounded AS (
            SELECT r.*,
                   CASE WHEN r.g THEN a.g_closed_before ELSE a.closed_before END AS closed_before,
                   CASE WHEN r.g THEN a.g_gemm_before ELSE a.gemm_before END AS gemm_before,
                   CASE WHEN r.g THEN b.g_closed_after ELSE b.closed_after END AS closed_after,
                   CASE WHEN r.g THEN b.g_gemm_after ELSE b.gemm_after END AS gemm_after,
                   lag(r.k1, 1, 0) OVER s AS prev_k1, lead(r.k0, 1, 9e18::BIGINT) OVER s AS next_k0
            FROM runs r
            JOIN w a ON {_at("a", "r", "r.k0")}
            JOIN w b ON {_at("b", "r", "r.k1")}
            WINDOW s AS (PARTITION BY r.trace_id, r.device, r.stream ORDER BY r.k0)
        ),
        post AS (
            SELECT *, CASE WHEN NOT backward AND gemm_after < coalesce(closed_after, 9e18) AND gemm_after < next_k0
                                AND gemm_after - k1 - 1 <= {POST_REACH} THEN gemm_after END AS out_k
            FROM bounded
        ),
        pre AS (
            SELECT *, CASE WHEN NOT backward AND gemm_before > greatest(coalesce(closed_before, 0), prev_k1, prev_out)
                                AND k0 - gemm_before - 1 <= {PRE_REACH} THEN gemm_before END AS qkv_k
            FROM (SELECT *, coalesce(lag(out_k) OVER s, 0) AS prev_out FROM post
                  WINDOW s AS (PARTITION BY trace_id, device, stream ORDER BY k0))
        )
        SELECT row_number() OVER () AS run_id, p.*, greatest(coalesce(CASE WHEN p.g THEN w.g_not_gemm_before ELSE w.not_gemm_before END, 0), p.prev_k1, p.prev_out, p.qkv_k - {QKV_GEMMS}) + 1 AS qkv_k0
        FROM pre p
        LEFT JOIN w ON {_at("w", "p", "p.qkv_k")}
        """
    )
    # Projections apart: inductor fuses a projection's bias add into the next q/k-norm kernel, so
    # FLUX's q, k and v GEMMs alternate with norm kernels. Before the adjacent group, the walk goes on
    # over at most EXT_REACH kernels to earlier GEMMs of the group's own kernel names (q, k and v
    # of one width run the same GEMM kernel), stopping at a norm kernel (the layer's input norm), a
    # GEMM of another name, a closed kernel or the previous block.
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _kext AS
        WITH look AS (
            SELECT run_id, trace_id, device, stream, g, qkv_k0, qkv_k, greatest(prev_k1, prev_out) AS floor_k,
                   unnest(range(greatest(qkv_k0 - {EXT_REACH}, 1), qkv_k + 1)) AS at_k
            FROM _kruns WHERE qkv_k IS NOT NULL
        ),
        j AS (
            SELECT l.run_id, l.qkv_k0, l.floor_k, q.k, q.name_id, q.norm,
                   CASE WHEN l.g THEN q.gopen ELSE q.open END AS is_open,
                   CASE WHEN l.g THEN q.gfree_gemm ELSE q.free_gemm END AS is_gemm
            FROM look l JOIN _kseq q
              ON {_at("q", "l", "l.at_k")}
        ),
        named AS (
            SELECT j.*, n.names FROM j
            JOIN (SELECT run_id, list(DISTINCT name_id) AS names FROM j WHERE k >= qkv_k0 GROUP BY run_id) n USING (run_id)
        ),
        stops AS (
            SELECT run_id, coalesce(max(k) FILTER (WHERE k <= floor_k OR NOT is_open OR norm
                                                      OR (is_gemm AND NOT list_contains(names, name_id))), 0) AS stop_k
            FROM named WHERE k < qkv_k0 GROUP BY run_id
        )
        SELECT n.run_id, min(n.k) AS ext_k0
        FROM named n JOIN stops s USING (run_id)
        WHERE n.k < n.qkv_k0 AND n.k > s.stop_k AND n.is_gemm
        GROUP BY n.run_id
        """
    )
    # Each kernel in one run's block: its run and its place (the run; the QKV GEMMs; between them
    # and the run; between the run and the output GEMM; the output GEMM; the all-reduce after it).
    con.execute(
        f"""
        INSERT INTO _kblock
        -- A block spans at most QKV_GEMMS + PRE_REACH + POST_REACH + 2 kernels beside its run: its
        -- positions, listed, join the sequence on equality (a range join would pair every run of a
        -- stream with every kernel of it).
        WITH spans AS (
            SELECT *, unnest(range(coalesce(qkv_lo, k0), coalesce(out_k + 1, k1) + 1)) AS at_k
            FROM (SELECT r.*, coalesce(e.ext_k0, r.qkv_k0) AS qkv_lo FROM _kruns r LEFT JOIN _kext e USING (run_id))
        ),
        placed AS (
            SELECT q.*, r.call_id AS run_call,
                   CASE WHEN q.k BETWEEN r.k0 AND r.k1 THEN CASE WHEN NOT r.g THEN 'run' END
                        WHEN q.k BETWEEN r.qkv_lo AND r.qkv_k THEN CASE WHEN q.gemm THEN 'qkv' ELSE 'pre' END
                        WHEN q.k > r.qkv_k AND q.k < r.k0 THEN 'pre'
                        WHEN q.k > r.k1 AND q.k < r.out_k THEN 'post'
                        WHEN q.k = r.out_k THEN 'out'
                        WHEN q.k = r.out_k + 1 AND q.reduction THEN 'reduce'
                   END AS place
            FROM spans r JOIN _kseq q
              ON {_at("q", "r", "r.at_k")}
        ),
        named AS (
            SELECT *, km.stage IS NOT NULL AND km.stage NOT IN {positional} AS by_rule FROM placed
            WHERE place IS NOT NULL AND (place <> 'run' OR id <> run_call)
        )
        SELECT id, run_call,
               CASE WHEN place = 'run' THEN NULL
                    WHEN place = 'qkv' THEN 'qkv_proj'
                    WHEN place IN ('out', 'reduce') THEN 'out_proj'
                    WHEN by_rule THEN km.stage
                    WHEN place = 'pre' AND (norm OR km.stage = 'norm') THEN 'qk_norm'
                    ELSE 'layout' END,
               CASE WHEN place = 'run' OR by_rule THEN 'kernel' ELSE '{SOURCE}' END,
               CASE WHEN place = 'run' THEN NULL WHEN by_rule THEN km.rule ELSE '{SOURCE}:' || place END,
               CASE WHEN place = 'run' THEN NULL WHEN by_rule THEN coalesce(km.attention, false) ELSE false END
        FROM named
        """
    )
    # Blocks are disjoint by construction (each side bounded by its neighbours'): a kernel taken
    # twice would be a bug, and two rows of one GPU op in gpu_op_stage_decisions.
    con.execute(
        "SELECT CASE WHEN count(*) > count(DISTINCT id) THEN error('internal: a kernel in two attention blocks') END "
        "FROM _kblock"
    ).fetchall()
    for t in ("_kstreams", "_kcpu", "_kcat", "_kname", "_kseq", "_kruns", "_kext"):
        con.execute(f"DROP TABLE {t}")


def _nearest(prefix: str, open_col: str | None, gemm_col: str | None) -> str:
    """SQL: per kernel, the nearest closed kernel (not ``open_col``) and free GEMM (``gemm_col``) on
    each side, and the nearest kernel before it that is no free GEMM, as ``{prefix}closed_before``,
    ... (the windows ``up`` and ``down``); all NULL when ``open_col`` is None."""
    if open_col is None:
        cols = ("closed_before", "gemm_before", "not_gemm_before", "closed_after", "gemm_after")
        return ", ".join(f"NULL::BIGINT AS {prefix}{c}" for c in cols)
    return f"""max(CASE WHEN NOT {open_col} THEN k END) OVER up AS {prefix}closed_before,
                   max(CASE WHEN {gemm_col} THEN k END) OVER up AS {prefix}gemm_before,
                   max(CASE WHEN NOT {gemm_col} THEN k END) OVER up AS {prefix}not_gemm_before,
                   min(CASE WHEN NOT {open_col} THEN k END) OVER down AS {prefix}closed_after,
                   min(CASE WHEN {gemm_col} THEN k END) OVER down AS {prefix}gemm_after"""


def _at(a: str, b: str, k: str) -> str:
    """SQL: the row ``a`` of the sequence is on ``b``'s stream at position ``k``."""
    return (
        f"{a}.trace_id = {b}.trace_id AND {a}.device IS NOT DISTINCT FROM {b}.device "
        f"AND {a}.stream IS NOT DISTINCT FROM {b}.stream AND {a}.k = {k}"
    )
