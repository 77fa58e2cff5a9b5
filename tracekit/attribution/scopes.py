"""Module scopes as attribution evidence: ``nn.Module`` and Python frames.

Traces recorded with ``with_modules`` (or ``with_stack``) carry
``python_function`` events such as ``nn.Module: Qwen3Attention_0`` or
``modeling_t5.py(236): compute_bias``. ``rule_module_stages`` maps the module
class (or the function name) to an attention call and/or a stage for the
scope's subtree. A CPU slice belongs to a scope when it lies inside it on the
same thread (time containment, with the link step's overhang), so a GPU op
belongs to a scope when its launching runtime call does: the projection rule
the labels use.

Python runs the steps (``attribution/module_match``, ``attribution/scopes``), which make the working
tables the attribution reads:

- ``_module_match``: the first matching rule per distinct frame name;
- ``_scope_marks``: each matched scope as a mark (``kind = 'module'``) with a
  position on the link step's axis (just before the first slice it contains,
  inner scopes after outer ones), so it orders with the label and op marks;
- ``_scope_pairs``: (slice, scope) for every CPU slice inside a scope.
"""

from __future__ import annotations

import duckdb

from tracekit.common import sqlmodules
from tracekit.model import link


def match(con: duckdb.DuckDBPyConnection) -> None:
    """``_module_match``: the first matching rule (lowest rule_order) per distinct frame name."""
    sqlmodules.run(con, "attribution/module_match")


def scopes(con: duckdb.DuckDBPyConnection) -> None:
    """``_scope_marks`` and ``_scope_pairs`` (needs ``_module_match`` and the link step's ``_cpu``)."""
    sqlmodules.run(con, "attribution/scopes", bleed=link.BLEED_NS)
