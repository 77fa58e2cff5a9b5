-- Where each core's block ends (after the core) and starts (before it, after the previous block's end).
--
-- The block ends at the first projection after the core when no X or R comes before it (o_proj), with the
-- R right after it if there is one (a row-parallel o_proj's all-reduce) and the reshapes (G) and the
-- probability and head ops (M, B) of 3+ dims right after those (nn.MultiheadAttention's output view, its
-- weights averaged over the heads), else
-- at the last head op (B) after the core. It starts at the first P or B after the last X or R before the
-- core (Hugging Face Llama: q/k/v_proj, their view + transpose, the rotary embedding, the KV-cache cat), or
-- at the core without either, taking in the M ops and the G ops of 3+ dims of the run of M, G and N (ops
-- on no tensor of 2+ dims) right before that (nn.MultiheadAttention's key_padding_mask made float, its
-- batch_first input transposed, its in-projection bias split); M ops between it and the core (the
-- key_padding_mask merged into the attn_mask) neither end nor start it. An X between two projections that
-- read the same width (after the previous block), on tensors as wide as the first one's output or its
-- per-row statistics, works on what that projection made (OLMo-2's q_norm and k_norm over [B, S, H * D]
-- rows between q_proj, k_proj and v_proj) and does not count.
-- A norm (L, siblings without shapes) ends a block as an X does; without shapes the start is read off the
-- projections (u_starts below). Last, a block's lead (its ops before its first projection) is cut to the
-- shortest lead of the blocks of its kind on the thread (consensus below): layers repeat.
--
-- @reads _eager_sibling_classes, _eager_block_cores
-- @creates _eager_ends   Per core (qk_id): start_i, end_i (its block's first and last sibling), prev_end (the previous block's last on the thread).
CREATE OR REPLACE TEMP TABLE _eager_ends AS
WITH after AS (
    SELECT qk_id,
           min(i) FILTER (WHERE i > pv_i AND cls IN ('X', 'R', 'L')) AS first_x,
           min(i) FILTER (WHERE i > pv_i AND cls = 'P') AS first_p
    FROM _eager_sibling_classes GROUP BY qk_id
),
proj_end AS (
    SELECT w.qk_id, w.pv_i, a.first_p < coalesce(a.first_x, 9e18) AS by_proj,
           CASE WHEN a.first_p < coalesce(a.first_x, 9e18)
                -- (with the reduction right after it, if any)
                THEN a.first_p + count(*) FILTER (WHERE w.i = a.first_p + 1 AND w.cls = 'R')
                ELSE coalesce(max(w.i) FILTER (WHERE w.i > w.pv_i AND w.cls = 'B'
                                               AND w.i < coalesce(a.first_x, 9e18)
                                               AND w.i < coalesce(a.first_p, 9e18)), w.pv_i) END AS end_i
    FROM _eager_sibling_classes w JOIN after a USING (qk_id) GROUP BY w.qk_id, w.pv_i, a.first_p, a.first_x
),
-- After the output projection, the run of reshapes (G), and probability ops (M) and head ops (B) on a tensor
-- of 3+ dims, right after it: the output's view back to [S, B, E] and nn.MultiheadAttention's weights
-- ([B * H, Sq, Skv], [B, H, Sq, Skv]), viewed and averaged over the heads (B where Skv equals D: the weights
-- look like heads). A 2-D mask op ends it: the next call's key_padding_mask [B, S] made float starts that
-- call's block. Without shapes: the reshapes and the reductions (M).
ends AS (
    SELECT e.qk_id, e.pv_i,
           CASE WHEN e.by_proj
                THEN coalesce(min(w.i) FILTER (WHERE w.i > e.end_i AND w.cls <> 'G'
                                              AND NOT (w.cls IN ('M', 'B') AND (w.max_rank >= 3 OR NOT w.shaped))),
                              max(w.i) FILTER (WHERE w.i > e.end_i) + 1, e.end_i + 1) - 1
                ELSE e.end_i END AS end_i
    FROM proj_end e LEFT JOIN _eager_sibling_classes w USING (qk_id)
    GROUP BY e.qk_id, e.pv_i, e.by_proj, e.end_i
),
prev AS (  -- where the block before it on the thread ends
    SELECT f.qk_id, lag(coalesce(e.end_i, f.pv_i)) OVER (PARTITION BY f.lane, f.parent_id ORDER BY f.qk_i)
               AS prev_end
    FROM _eager_block_cores f LEFT JOIN ends e USING (qk_id)
),
-- Before the core, each op's nearest projections on either side (after the previous block): an X
-- between two that read the same width, on tensors as wide as the first one's output (or its
-- per-row statistics) and of as many dims, works on what that projection made (OLMo-2's q_norm over
-- [B, S, H * D] rows, between q_proj and k_proj), not on the layer's hidden state; a residual add (two
-- activations of one shape) does not (an MLP's linear, relu and the residual add before the next layer). (The dims tell a
-- model's last [B, E] projection from the next model's first layer: CLIP's visual projection, then the
-- text embeddings' add and the layer's input norm over [B, S, E], the same width.)
near AS (
    SELECT w.qk_id, w.i, w.cls, w.last_dims, w.residual_add,
           last_value(CASE WHEN w.cls = 'P' AND w.i > coalesce(p.prev_end, -1) THEN w.gemm END IGNORE NULLS)
               OVER (PARTITION BY w.qk_id ORDER BY w.i ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS p_before,
           last_value(CASE WHEN w.cls = 'P' AND w.i > coalesce(p.prev_end, -1) THEN w.max_rank END IGNORE NULLS)
               OVER (PARTITION BY w.qk_id ORDER BY w.i ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS p_rank,
           w.max_rank,
           first_value(CASE WHEN w.cls = 'P' THEN w.gemm.i END IGNORE NULLS)
               OVER (PARTITION BY w.qk_id ORDER BY w.i ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS w_after
    FROM _eager_sibling_classes w JOIN prev p USING (qk_id)
    WHERE w.i < w.qk_i AND w.cls IN ('P', 'X', 'R', 'L')
),
-- An X after the last projection before the core that touches no tensor as wide as that projection's input
-- or output (the hidden state, q, k, v) is the call's own preparation, not the layer's: flex_attention's
-- default block mask ([1, 1], [1, 1, 1, 1] tensors), Hugging Face T5's relative-position buckets ([Sq, Skv]):
-- a residual add or norm between them would touch the hidden state.
bound AS (
    SELECT qk_id,
           max(i) FILTER (WHERE cls = 'R' OR cls IN ('X', 'L') AND NOT coalesce(p_before.i = w_after AND max_rank = p_rank
                                                                        AND list_has_all([p_before.o, 1], last_dims)
                                                                        AND NOT residual_add, false)
                                             AND NOT coalesce(cls = 'X' AND w_after IS NULL AND p_before.o IS NOT NULL
                                                              AND NOT list_has_any(last_dims, [p_before.i, p_before.o]), false))
               AS last_x
    FROM near GROUP BY qk_id
),
-- The layer's width: what the output projection writes (the first projection after the core, when it ends
-- the block). A projection before the block's first one that reads it is the model's, not the block's: an
-- input mapping into the layer's width (ALBERT's embedding_hidden_mapping_in, a model's first Linear from its
-- features) right before layer 0's in-projection.
width AS (
    SELECT a.qk_id, w.gemm.o AS e
    FROM after a JOIN _eager_sibling_classes w ON w.qk_id = a.qk_id AND w.i = a.first_p
    WHERE a.first_p < coalesce(a.first_x, 9e18)
),
mapped AS (  -- the last projection into the layer's width before the first that reads it
    SELECT qk_id, max(i) FILTER (WHERE i < reads_e AND gemm.i <> e) AS cut FROM (
        SELECT w.qk_id, w.i, w.gemm, e.e,
               min(w.i) FILTER (WHERE w.gemm.i = e.e) OVER (PARTITION BY w.qk_id) AS reads_e
        FROM _eager_sibling_classes w JOIN width e USING (qk_id) LEFT JOIN bound b USING (qk_id)
        WHERE w.i < w.qk_i AND w.cls = 'P' AND w.i > coalesce(b.last_x, -1)
    ) GROUP BY qk_id
),
first_ph AS (
    SELECT f.qk_id, coalesce(min(w.i), f.qk_i) AS start_i
    FROM _eager_block_cores f LEFT JOIN bound b USING (qk_id) LEFT JOIN mapped m USING (qk_id)
    LEFT JOIN _eager_sibling_classes w
      ON w.qk_id = f.qk_id AND w.i < w.qk_i AND w.cls IN ('P', 'B')
     AND w.i > greatest(coalesce(b.last_x, -1), coalesce(m.cut, -1))
    GROUP BY f.qk_id, f.qk_i
),
-- Back to the first mask op (M) or reshape (G) of the run of M, G and ops on no tensor of 2+ dims (N) right
-- before it: nn.MultiheadAttention makes a boolean key_padding_mask float (zeros_like, masked_fill_),
-- transposes a batch_first input and splits its in-projection's bias before its in-projection. (An N alone
-- does not start it: vLLM's quantization of the projection's input stays out.)
run_start AS (
    SELECT s.qk_id, s.start_i,
           max(w.i) FILTER (WHERE w.cls NOT IN ('M', 'G', 'N')) AS before_run
    FROM first_ph s LEFT JOIN _eager_sibling_classes w ON w.qk_id = s.qk_id AND w.i < s.start_i
    GROUP BY s.qk_id, s.start_i
),
starts AS (
    SELECT r.qk_id, coalesce(min(w.i), r.start_i) AS start_i
    FROM run_start r LEFT JOIN _eager_sibling_classes w
      ON w.qk_id = r.qk_id AND w.i < r.start_i AND w.i > coalesce(r.before_run, -1)
     -- (a reshape of activations, not a weight's transpose: vLLM's w.t() before its GEMM stays out)
     AND (w.cls = 'M' OR w.cls = 'G' AND w.max_rank >= 3)
    GROUP BY r.qk_id, r.start_i
),
-- Without shapes, before the core: the nearest projection and everything between it and the core (q/k norms,
-- a rotary embedding in plain ops, KV-cache writes: nothing else runs between a layer's q/k/v projections and
-- its attention), and before that projection the run of projections, reshapes and head ops back to the last
-- other op (or a norm that follows one: the layer's input norm after its residual add). A residual norm or a
-- reduction between that projection and the core says the projection is the previous layer's (its own were
-- not siblings): then the block starts as a shaped one's does.
unshaped AS (
    SELECT w.qk_id, w.i, w.cls, w.m_prev AS prev_cls
    FROM _eager_sibling_classes w JOIN prev p USING (qk_id)
    WHERE NOT w.shaped AND w.i < w.qk_i AND w.i > coalesce(p.prev_end, -1)
),
u_bound AS (
    SELECT qk_id, last_p,
           bool_or(i > last_p AND (cls = 'R' OR cls = 'L' AND coalesce(prev_cls, 'X') IN ('X', 'R', 'L'))) AS foreign,
           -- (a mask made before the projections bounds them as an X does: the run extension takes it back)
           max(i) FILTER (WHERE i < last_p AND (cls IN ('X', 'R', 'M') OR cls = 'L' AND coalesce(prev_cls, 'X') IN ('X', 'R', 'L'))) AS last_x
    FROM (SELECT *, max(i) FILTER (WHERE cls = 'P') OVER (PARTITION BY qk_id) AS last_p FROM unshaped)
    WHERE last_p IS NOT NULL
    GROUP BY qk_id, last_p
),
u_first AS (
    SELECT u.qk_id, min(u.i) AS start_i
    FROM unshaped u JOIN u_bound b USING (qk_id)
    WHERE NOT b.foreign AND u.i <= b.last_p AND u.i > coalesce(b.last_x, -1) AND u.cls IN ('P', 'B')
    GROUP BY u.qk_id
),
-- ... back over the run of masks made (M) and reshapes (G) right before it when it holds a mask made
-- (nn.MultiheadAttention's key_padding_mask made float, its batch_first input transposed); reshapes alone stay
-- out (a weight's transpose before its GEMM).
u_run AS (
    SELECT f.qk_id, f.start_i, max(u.i) FILTER (WHERE u.cls NOT IN ('M', 'G', 'N')) AS before_run
    FROM u_first f LEFT JOIN unshaped u ON u.qk_id = f.qk_id AND u.i < f.start_i
    GROUP BY f.qk_id, f.start_i
),
u_starts AS (
    SELECT r.qk_id, CASE WHEN bool_or(u.cls = 'M') THEN min(u.i) ELSE r.start_i END AS start_i
    FROM u_run r LEFT JOIN unshaped u ON u.qk_id = r.qk_id AND u.i < r.start_i AND u.i > coalesce(r.before_run, -1)
    GROUP BY r.qk_id, r.start_i
),
-- Layers repeat: the ops before a block's first projection (its lead) are the block's only as far as every
-- block of its kind on the thread (same head dim and query rank) has them. Layer 0 alone leading with the
-- model's own preparation (BERT's extended attention mask, OLMo-2's rotary table: no norm of a post-norm
-- layer stops the start there) keeps only the lead the other layers have.
bounds AS (
    SELECT f.qk_id, f.lane, f.d, f.qrank, f.qk_i, coalesce(u.start_i, s.start_i, f.qk_i) AS start_i,
           coalesce(e.end_i, f.pv_i) AS end_i, p.prev_end
    FROM _eager_block_cores f LEFT JOIN ends e USING (qk_id) LEFT JOIN starts s USING (qk_id)
    LEFT JOIN u_starts u USING (qk_id) JOIN prev p USING (qk_id)
),
-- (A lead counts from after the previous block's end: a start before it is cut there later, eager_blocks.)
leads AS (
    SELECT b.qk_id, b.lane, b.d, b.qrank, b.start_i, b.end_i, b.prev_end,
           greatest(b.start_i, coalesce(b.prev_end + 1, b.start_i)) AS from_i,
           min(w.i) FILTER (WHERE w.cls = 'P' AND w.i >= greatest(b.start_i, coalesce(b.prev_end + 1, b.start_i))
                                 AND w.i < b.qk_i) AS first_p
    FROM bounds b LEFT JOIN _eager_sibling_classes w USING (qk_id)
    GROUP BY b.qk_id, b.lane, b.d, b.qrank, b.start_i, b.end_i, b.prev_end
),
consensus AS (
    SELECT *, first_p - from_i AS lead,
           min(first_p - from_i) OVER (PARTITION BY lane, d, qrank) AS least,
           count(first_p) OVER (PARTITION BY lane, d, qrank) AS blocks
    FROM leads
)
SELECT qk_id, CASE WHEN blocks >= 2 AND lead > least THEN first_p - least ELSE start_i END AS start_i, end_i, prev_end
FROM consensus;
