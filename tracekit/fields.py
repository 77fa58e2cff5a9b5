"""The hot ``args`` fields, typed, grouped by the table that carries them.

Every event keeps its complete ``args`` as JSON in ``events``. The fields
queries use often become typed columns, but only on the table whose rows
have them: correlation and External id on ``events`` (every link needs
them), kernel launch parameters on ``gpu_ops``, shapes on ``cpu_slices``,
collective parameters on ``collectives``, Python ids on
``python_functions``. Typing 30-odd fields on every event cost the load
more than a third of its time for columns that are NULL on most rows.
"""

from __future__ import annotations

import json

# (key in args, column, type)
Field = tuple[str, str, str]

EVENT: list[Field] = [
    ("correlation", "correlation", "BIGINT"),
    ("External id", "external_id", "BIGINT"),
]
GPU: list[Field] = [
    ("device", "device", "INTEGER"),
    ("stream", "stream", "BIGINT"),
    ("grid", "grid", "INTEGER[]"),
    ("block", "block", "INTEGER[]"),
    ("registers per thread", "registers_per_thread", "INTEGER"),
    ("shared memory", "shared_memory_bytes", "BIGINT"),
    ("blocks per SM", "blocks_per_sm", "DOUBLE"),
    ("warps per SM", "warps_per_sm", "DOUBLE"),
    ("est. achieved occupancy %", "est_occupancy_pct", "DOUBLE"),
    ("bytes", "bytes", "BIGINT"),
    ("memory bandwidth (GB/s)", "memory_bandwidth_gbps", "DOUBLE"),
]
OP: list[Field] = [
    ("Input Dims", "input_dims", "JSON"),
    ("Input type", "input_types", "JSON"),
    ("Input Strides", "input_strides", "JSON"),
    ("Concrete Inputs", "concrete_inputs", "JSON"),
    ("Sequence number", "sequence_number", "BIGINT"),
    ("Fwd thread id", "fwd_thread_id", "BIGINT"),
    ("Record function id", "record_function_id", "BIGINT"),
]
RUNTIME: list[Field] = [("cbid", "cbid", "INTEGER")]
PYTHON: list[Field] = [
    ("Python id", "python_id", "BIGINT"),
    ("Python parent id", "python_parent_id", "BIGINT"),
]
COLLECTIVE: list[Field] = [
    ("Collective name", "collective_name", "VARCHAR"),
    ("In msg nelems", "in_msg_nelems", "BIGINT"),
    ("Out msg nelems", "out_msg_nelems", "BIGINT"),
    ("Group size", "group_size", "INTEGER"),
    ("dtype", "dtype", "VARCHAR"),
    ("In split size", "in_split_size", "VARCHAR"),
    ("Out split size", "out_split_size", "VARCHAR"),
    ("Process Group Name", "pg_name", "VARCHAR"),
    ("Process Group Description", "pg_desc", "VARCHAR"),
    ("Process Group Ranks", "pg_ranks", "VARCHAR"),
]


def spec(fields: list[Field]) -> str:
    """A json_transform struct spec (SQL string literal body) for ``fields``."""
    return json.dumps({k: t for k, _, t in fields}).replace("'", "''")


def typed(fields: list[Field], args: str, alias: str = "a") -> tuple[str, str]:
    """``(transform, columns)``: parse ``args`` once into ``alias``, then select the typed columns.

    Use as ``SELECT {columns} FROM (SELECT *, {transform} FROM ...)``.
    """
    transform = f"json_transform({args}, '{spec(fields)}') AS {alias}"
    columns = ", ".join(f'{alias}."{k}" AS {col}' for k, col, _ in fields)
    return transform, columns
