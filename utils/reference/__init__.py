# Generated from solutions/ by `python3 course.py build`. Do not edit: edit the notebook.
"""Reference implementations of every graded exercise."""
from .s00_start_here import tensor_shape_quiz  # noqa: F401
from .s01_qkv_and_scores import project_qkv, attention_scores  # noqa: F401
from .s02_scaling_and_softmax import dot_product_variance, scaled_attention_scores, softmax, softmax_jacobian  # noqa: F401
from .s03_single_head_attention import attention, Head  # noqa: F401
from .s04_masks import causal_mask, padding_mask, combine_masks, masked_softmax, is_causal  # noqa: F401
from .s05_multi_head_attention import MultiHeadAttention, split_heads, merge_heads, CausalSelfAttention, copy_heads_into  # noqa: F401
