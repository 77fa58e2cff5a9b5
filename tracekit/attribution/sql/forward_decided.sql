-- Whether a forward decision is worth giving the backward: its op is in an attention call or has a stage.
--
-- @fragment
-- @param d IDENT         The cpu_stage_decisions row.
({{d}}.call_id IS NOT NULL OR coalesce({{d}}.stage, 'other') <> 'other')
