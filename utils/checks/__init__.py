"""Visible checks: ``check_<name>(candidate)`` for every graded exercise.

Each returns quietly (printing a short Chinese pass line) when the candidate is right and
raises :class:`CheckError` — message in Chinese, starting with ``[code]`` — otherwise.
Hidden tests call the same functions with ``extended=True`` and another ``seed``.
"""
from .core import CheckError, install_notebook_hooks, mine_or_reference
from .s00 import check_tensor_shape_quiz
from .s01 import check_attention_scores, check_project_qkv
from .s02 import check_dot_product_variance, check_scaled_attention_scores, check_softmax, check_softmax_jacobian
from .s03 import check_attention, check_Head
from .s04 import check_causal_mask, check_combine_masks, check_is_causal, check_masked_softmax, check_padding_mask
from .s05 import (check_CausalSelfAttention, check_copy_heads_into, check_merge_heads, check_MultiHeadAttention,
                  check_split_heads)

install_notebook_hooks()

__all__ = [
    "CheckError", "mine_or_reference",
    "check_tensor_shape_quiz",
    "check_project_qkv", "check_attention_scores",
    "check_dot_product_variance", "check_scaled_attention_scores", "check_softmax", "check_softmax_jacobian",
    "check_attention", "check_Head",
    "check_causal_mask", "check_padding_mask", "check_combine_masks", "check_masked_softmax", "check_is_causal",
    "check_MultiHeadAttention", "check_split_heads", "check_merge_heads", "check_CausalSelfAttention",
    "check_copy_heads_into",
]
