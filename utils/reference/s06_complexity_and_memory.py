# Generated from solutions/06_complexity_and_memory/06_complexity_and_memory.ipynb
# by `python3 course.py build`. Do not edit: edit the notebook.
"""Reference implementations of section 06_complexity_and_memory (the solution cells of its notebook)."""
import math

import torch

__all__ = ['attention_flops', 'attention_weights_bytes', 'quiz_complexity', 'tiled_attention']


def attention_flops(B, H, T, Dh):
    """FLOPs of q @ kᵀ and weights @ v for [B, H, T, Dh] q, k, v; a multiply-add counts as 2 FLOPs."""
    qk = 2 * B * H * T * T * Dh   # (T, Dh) @ (Dh, T): T·T scores, Dh multiply-adds each
    av = 2 * B * H * T * Dh * T   # (T, T) @ (T, Dh): T·Dh outputs, T multiply-adds each
    return qk + av


def attention_weights_bytes(B, H, T, dtype=torch.float32):
    """Bytes of the [B, H, T, T] attention-weight tensor in the given dtype."""
    bytes_per_elem = torch.empty((), dtype=dtype).element_size()   # 4 for float32, 2 for float16 / bfloat16
    return B * H * T * T * bytes_per_elem


def quiz_complexity():
    """The numeric self-test: a dict of numbers (theory, not measurements).

    Keys: "flops_ratio", "bf16_bytes", "slope_flops", "slope_naive_memory", "slope_tiled_memory".
    """
    # return {"flops_ratio": ..., "bf16_bytes": ..., "slope_flops": ...,
    #         "slope_naive_memory": ..., "slope_tiled_memory": ...}
    return {
        "flops_ratio": 3 ** 2 / 2,                 # FLOPs ∝ T²·Dh: ×3² for T, ×1/2 for Dh
        "bf16_bytes": 2 * 12 * 3072 * 3072 * 2,    # B·H·T²·2 bytes
        "slope_flops": 2,                          # ∝ T²
        "slope_naive_memory": 2,                   # [B, H, T, T] ∝ T²
        "slope_tiled_memory": 1,                   # [B, H, T, 64] + 2·[B, H, T, 1] ∝ T
    }


def tiled_attention(q, k, v, block_size=64, causal=True):
    """FlashAttention's forward pass: softmax(q kᵀ / √D) v computed one key block at a time.

    q: (..., Tq, D), k: (..., Tk, D), v: (..., Tk, Dv) -> out (..., Tq, Dv), in q's dtype.
    causal=True is self-attention: Tq must equal Tk (else ValueError). Keeps a running max m,
    a running sum l and an un-normalised accumulator acc per query, all in float32 whatever
    the input dtype; never builds a [Tq, Tk] matrix.
    """
    Tq, Tk = q.size(-2), k.size(-2)
    if causal and Tq != Tk:
        raise ValueError(f"causal=True 是自注意力，需要 Tq == Tk，实际 Tq = {Tq}、Tk = {Tk}")
    scale = 1 / math.sqrt(q.size(-1))
    q32 = q.float()                                            # (..., Tq, D)   float32 all through
    m = q32.new_full((*q.shape[:-1], 1), float("-inf"))        # (..., Tq, 1)   running max
    l = q32.new_zeros((*q.shape[:-1], 1))                      # (..., Tq, 1)   running sum
    acc = q32.new_zeros((*q.shape[:-1], v.size(-1)))           # (..., Tq, Dv)  un-normalised output
    rows = torch.arange(Tq, device=q.device)[:, None]          # (Tq, 1)  query positions
    for start in range(0, Tk, block_size):
        k_blk = k[..., start:start + block_size, :].float()    # (..., b, D), the last block may be shorter
        v_blk = v[..., start:start + block_size, :].float()    # (..., b, Dv)
        s = q32 @ k_blk.transpose(-2, -1) * scale              # (..., Tq, b)  this block's scores only
        if causal:
            cols = start + torch.arange(k_blk.size(-2), device=q.device)   # (b,)  global key positions
            s = s.masked_fill(cols > rows, float("-inf"))      # (Tq, b) mask: key s visible iff s <= t
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (..., Tq, 1)
        alpha = torch.exp(m - m_new)                           # (..., Tq, 1)  rescales the old sums
        p = torch.exp(s - m_new)                               # (..., Tq, b)
        l = alpha * l + p.sum(dim=-1, keepdim=True)            # (..., Tq, 1)
        acc = alpha * acc + p @ v_blk                          # (..., Tq, Dv)
        m = m_new
    return (acc / l).to(q.dtype)                               # (..., Tq, Dv)
