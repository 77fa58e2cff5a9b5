"""Backward attention: the autograd ops of a decided forward op take its stage and call.

A training step's backward runs as autograd nodes (``autograd::engine::
evaluate_function: BmmBackward0`` around ``BmmBackward0`` and the ops it
runs), often on autograd's own thread and always outside the forward's
labels, module scopes and eager pattern. The profiler records on every op
autograd knows its ``Sequence number``: a forward op's (``Fwd thread id``
0) and the node that autograd later runs for it (``Fwd thread id`` > 0, a
counter of the forward's thread) carry the same number, which is how
PyTorch's own ``fwdbwd`` flows pair them. So each backward node takes the
decision of the forward op with its sequence number (the innermost decided
one, ops nested in a composite share the number): its stage, and its
forward call's backward call; everything the node runs (its ops, their
launches, the GPU ops those launch) goes with it, unless a layer of its own
decided it (a fused SDPA backward op is a call already). The source is
``backward`` and the decider the forward op.

Which thread ran the forward: the thread the ``fwdbwd`` flows start on for
that counter, when the trace has them; else the one thread whose forward ops
carry the number. A number that two threads' forward ops carry with no flow
to choose between them decides nothing.

One backward call per forward call: the fused backward op inside its nodes
when there is one (its call, from ``rule_op_stages``, grows by the nodes'
other work: the projections' and RoPE's gradients of a module call), else
a call of its own, whose id is its first node's (``_bw_call.new``).
"""

from __future__ import annotations

import duckdb

from tracekit.common import sqlmodules
from tracekit.schema.kinds import LAUNCH_KINDS

SOURCE = "backward"


def propagate(con: duckdb.DuckDBPyConnection) -> None:
    """Add the backward nodes' rows to ``cpu_stage_decisions`` and create ``_bw_call`` (call_id,
    fwd_call_id, trace_id, ts_ns, dur_ns, new). Needs ``_cpu`` and ``_anc``."""
    ((decided,),) = sqlmodules.fetch(con, "attribution/backward_start")
    if not decided:  # nothing decided in the forward (a trace without attention): nothing to give the backward
        return
    ((paired,),) = sqlmodules.fetch(con, "attribution/backward_nodes")
    if paired:
        sqlmodules.run(con, "attribution/backward_rows", launch_kinds=LAUNCH_KINDS, source=SOURCE)
