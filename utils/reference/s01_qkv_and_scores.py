# Generated from solutions/01_qkv_and_scores/01_qkv_and_scores.ipynb
# by `python3 course.py build`. Do not edit: edit the notebook.
"""Reference implementations of section 01_qkv_and_scores (the solution cells of its notebook)."""


__all__ = ['project_qkv', 'attention_scores']


def project_qkv(x, w_q, w_k, w_v):
    """Project hidden states into queries, keys and values: Q = X W_Q, K = X W_K, V = X W_V.

    x: (..., T, C) hidden states, any number of leading batch dims.
    w_q, w_k, w_v: (C, D) weights in the math layout (NOT nn.Linear's (D, C) layout).
    Returns the tuple (q, k, v), each (..., T, D).
    """
    q = x @ w_q  # (..., T, C) @ (C, D) -> (..., T, D)
    k = x @ w_k  # (..., T, D)
    v = x @ w_v  # (..., T, D)
    return q, k, v


def attention_scores(q, k):
    """Unscaled attention scores S = Q Kᵀ, with S[..., t, s] = q_t · k_s.

    q: (..., Tq, D) queries; k: (..., Tk, D) keys, same leading dims.
    Returns (..., Tq, Tk): rows are query positions, columns are key positions.
    """
    return q @ k.transpose(-2, -1)  # (..., Tq, D) @ (..., D, Tk) -> (..., Tq, Tk)
