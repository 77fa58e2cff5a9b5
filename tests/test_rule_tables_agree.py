"""The shipped rule tables agree: every op that op_stages.csv makes fused attention or an attention call is in
op_categories.csv's attention category (op_summary / op_categories), so the two cannot disagree again
(``aten::_cudnn_attention_forward`` was elementwise there while the stage rules knew it as attention).

The op names are generated from the stage rules' own patterns (one name per alternative, optional parts left out
and taken once) and checked with DuckDB's RE2 as the build reads them: each must match its stage rule, and the
first op category rule that matches it must say attention.
"""

from __future__ import annotations

import itertools
import re._constants as C  # noqa: N812 (the names of sre's opcodes)
import re._parser as sre

import duckdb
import pytest

from tracekit.model import rules


def _examples(pattern: str, limit: int = 64) -> list[str]:
    """Strings ``pattern`` matches: one per alternative, each optional or repeated part left out and taken once."""

    def walk(items) -> list[str]:
        out = [""]
        for op, av in items:
            if op is C.LITERAL:
                opts = [chr(av)]
            elif op is C.IN:
                kind, value = av[0]
                if kind is C.NEGATE:
                    opts = ["_"]
                elif kind is C.CATEGORY:
                    opts = ["x" if value is C.CATEGORY_WORD else "0"]
                else:
                    opts = [chr(value if kind is C.LITERAL else value[0])]
            elif op is C.BRANCH:
                opts = [s for branch in av[1] for s in walk(branch)]
            elif op is C.SUBPATTERN:
                opts = walk(av[3])
            elif op in (C.MAX_REPEAT, C.MIN_REPEAT):
                low, _high, sub = av
                once = walk(sub)
                opts = ["".join(p) for p in itertools.product(once, repeat=low)] if low else ["", *once]
            elif op is C.AT:
                opts = [""]
            elif op is C.CATEGORY:
                opts = ["x" if av is C.CATEGORY_WORD else "0"]
            else:
                raise AssertionError(f"{pattern}: the test cannot write an example for {op}")
            out = [a + b for a in out for b in opts][:limit]
        return out

    return sorted(set(walk(sre.parse(pattern))))


@pytest.fixture(scope="module")
def con():
    con = duckdb.connect()
    rules.load(con)
    yield con
    con.close()


def _attention_ops(con) -> list[tuple[str, str]]:
    rows = con.execute(
        "SELECT pattern FROM rule_op_stages WHERE stage = 'fused_attention' OR call = 'yes' ORDER BY rule_order"
    ).fetchall()
    return [(p, name) for (p,) in rows for name in _examples(p)]


def test_the_generated_names_are_the_stage_rules_own(con):
    ops = _attention_ops(con)
    assert len(ops) > 40 and ("^aten::_cudnn_attention_forward$", "aten::_cudnn_attention_forward") in ops
    for pattern, name in ops:
        assert con.execute("SELECT regexp_matches(?, ?)", [name, pattern]).fetchone() == (True,), (pattern, name)


def test_every_attention_op_of_the_stage_rules_is_an_attention_category(con):
    wrong = {}
    for pattern, name in _attention_ops(con):
        (category,) = con.execute(
            "SELECT arg_min(category, rule_order) FROM rule_op_categories "
            "WHERE applies_to = 'op' AND regexp_matches(?, pattern)",
            [name],
        ).fetchone()
        if category != "attention":
            wrong[name] = (category, pattern)
    assert wrong == {}
