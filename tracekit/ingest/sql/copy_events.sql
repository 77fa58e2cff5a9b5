-- A staged batch's rows as rows of events: numbered, with each trace's ordinal and the normalized kind.
--
-- id counts on from id_base; ordinal is the row's place in its trace (from each trace's first row,
-- first_rows). The kind comes from the category (schema.kinds.CATEGORY_KINDS, matched case-insensitively),
-- by phase when there is none. The copy into events need not keep row order, so the category lookup is a
-- hash join on the few categories rather than a CASE chain per row. 2021 traces file record_function ranges
-- under "Operator" like any op: ranges are the ones named without a namespace and without shapes.
--
-- @fragment
-- @param batch IDENT            The staged batch table.
-- @param id_base INT            The first id of the batch (events' rows so far).
-- @param first_rows ROWS        (trace_id, the row number of its first event) per trace of the batch.
-- @param category_kinds ROWS    (lower-case category, kind): schema.kinds.CATEGORY_KINDS.
SELECT b.* EXCLUDE (_colons) REPLACE (
           {{id_base}} + b.rowid AS id,
           b.rowid - f.first_row AS ordinal,
           CASE WHEN b.cat = 'Operator' AND b.ph = 'X' AND b.name NOT LIKE '%::%'
                     AND b.name NOT LIKE '%Backward%' AND NOT contains(CAST(b.args AS VARCHAR), '"Input Dims"')
                THEN 'user_annotation'
                ELSE CASE WHEN b.cat IS NULL
                          THEN (CASE b.ph WHEN 'M' THEN 'metadata' WHEN 'i' THEN 'marker' WHEN 'I' THEN 'marker'
                                WHEN 'C' THEN 'counter' ELSE 'unknown' END)
                          ELSE coalesce(k.kind, 'unknown') END
           END AS kind)
FROM {{batch}} b JOIN (VALUES {{first_rows}}) f(trace_id, first_row) ON f.trace_id = b.trace_id
LEFT JOIN (VALUES {{category_kinds}}) AS k(lcat, kind) ON k.lcat = lower(b.cat)
