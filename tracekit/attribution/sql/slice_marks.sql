-- The marks (slices and scopes a rule marks, with their position on the axis) and each CPU slice's marks.
--
-- A label or op a rule matches is a mark at its own position; a module scope is one at its position just
-- before the first slice it contains (attribution/scopes). Each CPU slice has its marked ancestors-or-self;
-- runtime calls (leaves) take their parent's; every slice inside a marked module scope has that scope.
--
-- @reads _cpu, _anc, cpu_slices, _label_match, _op_match, _scope_marks, _scope_pairs
-- @creates _marked        The marks: id, mkey (the mark's key: the slice's id, or a negated one for a mark made for it), kind (user_annotation, cpu_op, module; eager, block later), pos, stage, is_call, impl, context, scope, causal_arg, rule.
-- @creates _slice_marks   (x, mkey): each CPU slice x and a mark that covers it.
CREATE OR REPLACE TEMP TABLE _marked AS
SELECT c.id, c.id AS mkey, c.kind, c.pos::DOUBLE AS pos, m.m.stage, m.m.is_call, m.m.impl, m.m.context,
       m.m.scope, m.m.causal_arg, m.m.rule
FROM _cpu c
JOIN (SELECT name, m, 'user_annotation' AS kind FROM _label_match
      UNION ALL SELECT name, m, 'cpu_op' FROM _op_match) m
  ON m.name = c.name AND m.kind = c.kind
UNION ALL
SELECT id, mkey, kind, pos, stage, is_call, impl, context, scope, causal_arg, rule FROM _scope_marks;

CREATE OR REPLACE TEMP TABLE _slice_marks AS
WITH cm AS (
    SELECT a.id, a.aid AS mkey FROM _anc a JOIN _marked m ON m.mkey = a.aid AND m.kind <> 'module'
    UNION ALL SELECT id, mkey FROM _marked WHERE kind <> 'module'
)
SELECT cm.id AS x, cm.mkey FROM cm
UNION ALL
SELECT s.id, cm.mkey FROM cpu_slices s JOIN cm ON cm.id = s.parent_id
WHERE s.kind IN ('runtime', 'driver')
UNION ALL
SELECT x, sid FROM _scope_pairs;
