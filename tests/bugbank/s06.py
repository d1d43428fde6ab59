"""Bug bank of 06_complexity_and_memory."""
from . import fits_visible, right, wrong

_TILED = '''
def tiled_attention(q, k, v, block_size=64, causal=True):
    Tq, Tk = q.size(-2), k.size(-2)
    if {guard}causal and Tq != Tk:
        raise ValueError("causal=True is self-attention: Tq must equal Tk")
    scale = 1 / math.sqrt(q.size(-1))
    work = {work}                                          # the dtype of m, l and acc
    q_w = q.to(work)
    m = q_w.new_full((*q.shape[:-1], 1), float("-inf"))
    l = q_w.new_zeros((*q.shape[:-1], 1))
    acc = q_w.new_zeros((*q.shape[:-1], v.size(-1)))
    rows = torch.arange(Tq)[:, None]
    for start in {blocks}:
        kb, vb = k[..., start:start + block_size, :].to(work), v[..., start:start + block_size, :].to(work)
        s = q_w @ kb.transpose(-2, -1) * scale
        if causal:
            cols = {cols}
            s = s.masked_fill({future}, float("-inf"))
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        p = torch.exp(s - m_new)
        alpha = torch.exp(m - m_new)
        l = alpha * l + p.sum(dim=-1, keepdim=True)
        {update}
        m = m_new
    return ({result}).to(q.dtype)
'''


def tiled(blocks="range(0, Tk, block_size)", cols="start + torch.arange(kb.size(-2))", future="cols > rows",
          update="acc = alpha * acc + p @ vb", result="acc / l", work="torch.float32", guard="") -> str:
    return _TILED.format(blocks=blocks, cols=cols, future=future, update=update, result=result, work=work,
                         guard=guard)


VARIANTS = [
    # --- attention_flops ---
    right("attention_flops", "formula", """
        def attention_flops(B, H, T, Dh):
            return 4 * B * H * T * T * Dh
    """),
    right("attention_flops", "two-matmuls-summed", """
        def attention_flops(B, H, T, Dh):
            qk = 2 * B * H * T * T * Dh      # (T, Dh) @ (Dh, T): T·T outputs, Dh multiply-adds each
            av = 2 * B * H * T * Dh * T      # (T, T) @ (T, Dh): T·Dh outputs, T multiply-adds each
            return qk + av
    """),
    right("attention_flops", "pow-int", """
        def attention_flops(B, H, T, Dh):
            return int(4 * B * H * T ** 2 * Dh)
    """),
    # counted matmul by matmul, as the shape table of §1 asks
    right("attention_flops", "matmul-helper", """
        def attention_flops(B, H, T, Dh):
            def matmul(m, n, p):                      # (m × n) @ (n × p): m·p outputs, n multiply-adds each
                return 2 * m * n * p
            return B * H * (matmul(T, Dh, T) + matmul(T, T, Dh))
    """),
    wrong("attention_flops", "matmul-helper-mac-as-one", "flops-mac-as-one", """
        def attention_flops(B, H, T, Dh):
            def matmul(m, n, p):
                return m * n * p
            return B * H * (matmul(T, Dh, T) + matmul(T, T, Dh))
    """),
    wrong("attention_flops", "mac-as-one", "flops-mac-as-one", """
        def attention_flops(B, H, T, Dh):
            qk = B * H * T * T * Dh
            av = B * H * T * T * Dh
            return qk + av
    """),
    wrong("attention_flops", "only-qk", "flops-one-matmul", """
        def attention_flops(B, H, T, Dh):
            return 2 * B * H * T * T * Dh   # q @ k^T: a multiply-add is 2 FLOPs
    """),
    wrong("attention_flops", "missing-batch", "count-missing-batch", """
        def attention_flops(B, H, T, Dh):
            return 4 * H * T * T * Dh
    """),
    wrong("attention_flops", "missing-heads", "count-missing-heads", """
        def attention_flops(B, H, T, Dh):
            return 4 * B * T * T * Dh
    """),
    wrong("attention_flops", "linear-in-T", "count-T-not-squared", """
        def attention_flops(B, H, T, Dh):
            return 4 * B * H * T * Dh
    """),
    wrong("attention_flops", "float", "wrong-type", """
        def attention_flops(B, H, T, Dh):
            return 4.0 * B * H * T * T * Dh
    """),
    # --- attention_weights_bytes ---
    right("attention_weights_bytes", "element-size", """
        def attention_weights_bytes(B, H, T, dtype=torch.float32):
            return B * H * T * T * torch.empty((), dtype=dtype).element_size()
    """),
    right("attention_weights_bytes", "meta-tensor", """
        def attention_weights_bytes(B, H, T, dtype=torch.float32):
            w = torch.empty(B, H, T, T, dtype=dtype, device="meta")   # shape and dtype, no memory
            return w.numel() * w.element_size()
    """),
    right("attention_weights_bytes", "finfo-bits", """
        def attention_weights_bytes(B, H, T, dtype=torch.float32):
            return B * H * T * T * (torch.finfo(dtype).bits // 8)
    """),
    right("attention_weights_bytes", "dtype-itemsize", """
        def attention_weights_bytes(B, H, T, dtype=torch.float32):
            return B * H * T ** 2 * dtype.itemsize
    """),
    wrong("attention_weights_bytes", "missing-batch", "count-missing-batch", """
        def attention_weights_bytes(B, H, T, dtype=torch.float32):
            return H * T * T * torch.empty((), dtype=dtype).element_size()
    """),
    wrong("attention_weights_bytes", "missing-heads", "count-missing-heads", """
        def attention_weights_bytes(B, H, T, dtype=torch.float32):
            return B * T * T * torch.empty((), dtype=dtype).element_size()
    """),
    wrong("attention_weights_bytes", "element-count", "bytes-missing-dtype-size", """
        def attention_weights_bytes(B, H, T, dtype=torch.float32):
            return B * H * T * T
    """),
    wrong("attention_weights_bytes", "always-4-bytes", "bytes-ignores-dtype", """
        def attention_weights_bytes(B, H, T, dtype=torch.float32):
            return B * H * T * T * 4
    """),
    wrong("attention_weights_bytes", "bits", "bytes-as-bits", """
        def attention_weights_bytes(B, H, T, dtype=torch.float32):
            return B * H * T * T * torch.finfo(dtype).bits
    """),
    # --- quiz_complexity ---
    right("quiz_complexity", "numbers", """
        def quiz_complexity():
            return {"flops_ratio": 4.5, "bf16_bytes": 2 * 12 * 3072 * 3072 * 2,
                    "slope_flops": 2, "slope_naive_memory": 2, "slope_tiled_memory": 1}
    """),
    right("quiz_complexity", "computed", """
        def quiz_complexity():
            flops = lambda T, Dh: 4 * T * T * Dh
            return {"flops_ratio": flops(3, 1) / flops(1, 2),
                    "bf16_bytes": torch.empty(2, 12, 3072, 3072, dtype=torch.bfloat16, device="meta").nbytes,
                    "slope_flops": 2.0, "slope_naive_memory": 2.0, "slope_tiled_memory": 1.0}
    """),
    wrong("quiz_complexity", "ratio-ignores-head-width", "quiz-flops-ratio", """
        def quiz_complexity():
            return {"flops_ratio": 9, "bf16_bytes": 2 * 12 * 3072 * 3072 * 2,
                    "slope_flops": 2, "slope_naive_memory": 2, "slope_tiled_memory": 1}
    """),
    wrong("quiz_complexity", "ratio-linear-in-T", "quiz-flops-ratio", """
        def quiz_complexity():
            return {"flops_ratio": 1.5, "bf16_bytes": 2 * 12 * 3072 * 3072 * 2,
                    "slope_flops": 2, "slope_naive_memory": 2, "slope_tiled_memory": 1}
    """),
    wrong("quiz_complexity", "bf16-as-fp32", "quiz-bf16-bytes", """
        def quiz_complexity():
            return {"flops_ratio": 4.5, "bf16_bytes": 2 * 12 * 3072 * 3072 * 4,
                    "slope_flops": 2, "slope_naive_memory": 2, "slope_tiled_memory": 1}
    """),
    wrong("quiz_complexity", "bf16-in-GiB", "quiz-bf16-bytes", """
        def quiz_complexity():
            return {"flops_ratio": 4.5, "bf16_bytes": 2 * 12 * 3072 * 3072 * 2 / 2**30,
                    "slope_flops": 2, "slope_naive_memory": 2, "slope_tiled_memory": 1}
    """),
    wrong("quiz_complexity", "flops-slope-1", "quiz-slope-flops", """
        def quiz_complexity():
            return {"flops_ratio": 4.5, "bf16_bytes": 2 * 12 * 3072 * 3072 * 2,
                    "slope_flops": 1, "slope_naive_memory": 2, "slope_tiled_memory": 1}
    """),
    fits_visible("quiz_complexity", "memory-slope-4", "quiz-slope-naive-memory", """
        def quiz_complexity():
            return {"flops_ratio": 4.5, "bf16_bytes": 2 * 12 * 3072 * 3072 * 2,
                    "slope_flops": 2, "slope_naive_memory": 4, "slope_tiled_memory": 1}
    """),
    fits_visible("quiz_complexity", "tiled-slope-0", "quiz-slope-tiled-memory", """
        def quiz_complexity():
            return {"flops_ratio": 4.5, "bf16_bytes": 2 * 12 * 3072 * 3072 * 2,
                    "slope_flops": 2, "slope_naive_memory": 2, "slope_tiled_memory": 0}
    """),
    fits_visible("quiz_complexity", "tiled-slope-2", "quiz-slope-tiled-memory", """
        def quiz_complexity():
            return {"flops_ratio": 4.5, "bf16_bytes": 2 * 12 * 3072 * 3072 * 2,
                    "slope_flops": 2, "slope_naive_memory": 2, "slope_tiled_memory": 2}
    """),
    wrong("quiz_complexity", "missing-key", "quiz-missing-key", """
        def quiz_complexity():
            return {"flops_ratio": 4.5, "bf16_bytes": 2 * 12 * 3072 * 3072 * 2}
    """),
    # --- tiled_attention ---
    right("tiled_attention", "key-blocked", tiled()),
    right("tiled_attention", "query-and-key-blocked", """
        def tiled_attention(q, k, v, block_size=64, causal=True):
            Tq, Tk = q.size(-2), k.size(-2)
            assert not causal or Tq == Tk, "causal=True is self-attention: Tq must equal Tk"
            scale = 1 / math.sqrt(q.size(-1))
            dtype, (q, k, v) = q.dtype, (t.float() for t in (q, k, v))   # float32 all through
            out = []
            for qs in range(0, Tq, block_size):
                qb = q[..., qs:qs + block_size, :]                       # (..., bq, D)
                rows = qs + torch.arange(qb.size(-2))[:, None]           # (bq, 1)
                m = torch.full((*qb.shape[:-1], 1), float("-inf"))
                l = torch.zeros(*qb.shape[:-1], 1)
                acc = torch.zeros(*qb.shape[:-1], v.size(-1))
                for ks in range(0, Tk, block_size):
                    if causal and ks > qs + qb.size(-2) - 1:
                        break                                            # the whole key block is in the future
                    kb, vb = k[..., ks:ks + block_size, :], v[..., ks:ks + block_size, :]
                    s = qb @ kb.transpose(-2, -1) * scale                # (..., bq, bk)
                    if causal:
                        cols = ks + torch.arange(kb.size(-2))[None, :]
                        s = s.masked_fill(cols > rows, float("-inf"))
                    m_new = torch.maximum(m, s.amax(-1, keepdim=True))
                    p = torch.exp(s - m_new)
                    alpha = torch.exp(m - m_new)
                    l = alpha * l + p.sum(-1, keepdim=True)
                    acc = alpha * acc + p @ vb
                    m = m_new
                out.append(acc / l)
            return torch.cat(out, dim=-2).to(dtype)
    """),
    right("tiled_attention", "logsumexp", """
        def tiled_attention(q, k, v, block_size=64, causal=True):
            Tq, Tk = q.size(-2), k.size(-2)
            if causal and Tq != Tk:
                raise ValueError(f"causal needs Tq == Tk, got {Tq} and {Tk}")
            s_all_scale = q.size(-1) ** -0.5
            lse = torch.full((*q.shape[:-1], 1), float("-inf"))         # running log Σ exp(s)
            out = torch.zeros(*q.shape[:-1], v.size(-1))                  # kept normalised at every step
            t = torch.arange(Tq).unsqueeze(-1)
            for start in range(0, Tk, block_size):
                end = min(start + block_size, Tk)
                s = q.float() @ k[..., start:end, :].float().mT * s_all_scale
                if causal:
                    s = torch.where(torch.arange(start, end) <= t, s, float("-inf"))
                lse_new = torch.logaddexp(lse, torch.logsumexp(s, dim=-1, keepdim=True))
                out = out * torch.exp(lse - lse_new) + torch.exp(s - lse_new) @ v[..., start:end, :].float()
                lse = lse_new
            return out.to(q.dtype)
    """),
    right("tiled_attention", "normalised-running-output", tiled(result="acc").replace(
        "l = alpha * l + p.sum(dim=-1, keepdim=True)\n        {update}".format(update="acc = alpha * acc + p @ vb"),
        "l_new = alpha * l + p.sum(dim=-1, keepdim=True)\n"
        "        acc = acc * (alpha * l / l_new) + (p @ vb) / l_new   # acc stays a weighted average\n"
        "        l = l_new")),
    wrong("tiled_attention", "no-rescale", "tiled-no-rescale", tiled(update="acc = acc + p @ vb")),
    wrong("tiled_attention", "no-rescale-sum-either", "tiled-no-rescale", tiled(update="acc = acc + p @ vb").replace(
        "l = alpha * l + p.sum(dim=-1, keepdim=True)", "l = l + p.sum(dim=-1, keepdim=True)")),
    wrong("tiled_attention", "drops-last-block", "tiled-drops-last-block", tiled(
        blocks="range(0, Tk - block_size + 1, block_size)")),
    wrong("tiled_attention", "floor-division-blocks", "tiled-drops-last-block", tiled(
        blocks="(j * block_size for j in range(Tk // block_size))")),
    wrong("tiled_attention", "diagonal-excluded", "tiled-diagonal-off-by-one", tiled(future="cols >= rows")),
    wrong("tiled_attention", "diagonal-plus-one", "tiled-diagonal-off-by-one", tiled(future="cols > rows + 1")),
    wrong("tiled_attention", "local-key-index", "tiled-block-offset", tiled(cols="torch.arange(kb.size(-2))")),
    wrong("tiled_attention", "divides-too-early", "tiled-normalized-too-early", tiled(
        update="acc = alpha * acc + (p @ vb) / l", result="acc")),
    wrong("tiled_attention", "normalises-every-block", "tiled-normalized-too-early", tiled(
        update="acc = (alpha * acc + p @ vb) / l", result="acc")),
    wrong("tiled_attention", "full-score-matrix", "tiled-materializes-scores", """
        def tiled_attention(q, k, v, block_size=64, causal=True):
            Tq, Tk = q.size(-2), k.size(-2)
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))        # (..., Tq, Tk): the whole table
            if causal:
                scores = scores.masked_fill(torch.ones(Tq, Tk, dtype=torch.bool).triu(1), float("-inf"))
            m = torch.full((*q.shape[:-1], 1), float("-inf"))
            l = torch.zeros(*q.shape[:-1], 1)
            acc = torch.zeros(*q.shape[:-1], v.size(-1))
            for start in range(0, Tk, block_size):
                s = scores[..., start:start + block_size]
                m_new = torch.maximum(m, s.amax(-1, keepdim=True))
                p = torch.exp(s - m_new)
                alpha = torch.exp(m - m_new)
                l = alpha * l + p.sum(-1, keepdim=True)
                acc = alpha * acc + p @ v[..., start:start + block_size, :]
                m = m_new
            return acc / l
    """),
    wrong("tiled_attention", "full-causal-mask", "tiled-materializes-scores", tiled(
        cols="torch.ones(Tq, Tk, dtype=torch.bool).tril()[:, start:start + block_size]", future="~cols")),
    wrong("tiled_attention", "sdpa", "tiled-uses-sdpa", """
        def tiled_attention(q, k, v, block_size=64, causal=True):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    """),
    wrong("tiled_attention", "always-causal", "causal-flag-ignored", tiled().replace("if causal:", "if True:")),
    # m, l and acc kept in the input's dtype: right in float32, rounding piles up over the blocks in 16 bits
    wrong("tiled_attention", "input-dtype-accumulator", "tiled-low-precision-accumulator", tiled(work="q.dtype")),
    # float32 for the matmuls only: l and acc stored back in the input's dtype after every block
    wrong("tiled_attention", "low-precision-running-sums", "tiled-low-precision-accumulator", tiled(
        update="acc = (alpha * acc + p @ vb).to(q.dtype).float(); l = l.to(q.dtype).float()")),
    # no guard: a causal call with Tq != Tk silently masks by top-left positions
    wrong("tiled_attention", "causal-any-shapes", "tiled-causal-shape-unchecked", tiled(guard="False and ")),
    # --- a known mistake's number on one case only: no diagnosis (counts.Counts) ---
    # planted: half the count where T = 7, a third elsewhere
    wrong("attention_flops", "half-on-one-input", "wrong", """
        def attention_flops(B, H, T, Dh):
            return 4 * B * H * T * T * Dh // (2 if T == 7 else 3)
    """),
]
