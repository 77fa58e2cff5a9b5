"""The hot ``args`` fields, typed, grouped by the table that carries them.

Every event keeps its complete ``args`` as JSON in ``events``. The fields
queries use often become typed columns, but only on the table whose rows
have them: correlation and External id on ``events`` (every link needs
them), kernel launch parameters on ``gpu_ops``, shapes on ``cpu_slices``,
collective parameters on ``collectives``, Python ids on
``python_functions``. Typing every one of them on every event made the
load much slower for columns that are NULL on most rows.

Which fields, their columns and types are declared once, with the columns'
docs, in ``schema`` (``name TYPE {args key}  doc``).
"""

from __future__ import annotations

import json

from tracekit.common.sqltext import literal
from tracekit.schema.catalog import args_fields

# (key in args, column, type), declared with the columns in ``schema``.
Field = tuple[str, str, str]

EVENT: list[Field] = args_fields("events")
GPU: list[Field] = args_fields("gpu_ops")
OP: list[Field] = args_fields("cpu_slices")
RUNTIME: list[Field] = args_fields("runtime_calls")
PYTHON: list[Field] = args_fields("python_functions")
COLLECTIVE: list[Field] = args_fields("collectives")


def spec_json(fields: list[Field]) -> str:
    """A json_transform struct spec for ``fields``, as JSON text (``{"key": "TYPE", ...}``)."""
    return json.dumps({k: t for k, _, t in fields})


def spec(fields: list[Field]) -> str:
    """The same spec as a SQL string literal."""
    return literal(spec_json(fields))
