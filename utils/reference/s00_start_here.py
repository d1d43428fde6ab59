# Generated from solutions/00_start_here/00_start_here.ipynb
# by `python3 course.py build`. Do not edit: edit the notebook.
"""Reference implementations of section 00_start_here (the solution cells of its notebook)."""


__all__ = ['tensor_shape_quiz']


def tensor_shape_quiz():
    """Warm-up: the shape of every tensor in one attention head, worked out by hand.

    Setting: X has shape [B, T, C] = [2, 5, 8]; W_Q, W_K, W_V each have shape [C, D] = [8, 4].
        Q = X @ W_Q,  K = X @ W_K,  V = X @ W_V
        scores  = Q @ K.transpose(-2, -1)
        weights = softmax(scores, dim=-1)
        out     = weights @ V

    Return a dict with exactly these six string keys: "Q", "K", "V", "scores", "weights", "out".
    Each value is that tensor's shape as a tuple of ints; X's own shape, for example, is (2, 5, 8).
    """
    return {
        "Q": (2, 5, 4),        # X @ W_Q: (2, 5, 8) @ (8, 4)
        "K": (2, 5, 4),
        "V": (2, 5, 4),
        "scores": (2, 5, 5),   # Q @ Kᵀ: (2, 5, 4) @ (2, 4, 5)
        "weights": (2, 5, 5),  # softmax keeps the shape
        "out": (2, 5, 4),      # weights @ V: (2, 5, 5) @ (2, 5, 4)
    }
