-- Whether a row of the kernel sequence is on a span's stream at the span's position at.
--
-- @fragment
-- @param kernel IDENT    The row of _kb_sequence.
-- @param span IDENT      The row with trace_id, device, stream and the position.
-- @param at IDENT        The span's column holding the position.
{{kernel}}.trace_id = {{span}}.trace_id AND {{kernel}}.device IS NOT DISTINCT FROM {{span}}.device
AND {{kernel}}.stream IS NOT DISTINCT FROM {{span}}.stream AND {{kernel}}.k = {{span}}.{{at}}
