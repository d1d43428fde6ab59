# Generated from solutions/
# by `python3 course.py build`. Do not edit: edit the notebook.
"""Reference implementations of every graded exercise."""
from .s00_start_here import (tensor_shape_quiz)
from .s01_qkv_and_scores import (project_qkv, attention_scores)
from .s02_scaling_and_softmax import (dot_product_variance, scaled_attention_scores, softmax,
    softmax_jacobian)
from .s03_single_head_attention import (attention, Head)
from .s04_masks import (causal_mask, padding_mask, combine_masks, masked_softmax, is_causal)
from .s05_multi_head_attention import (MultiHeadAttention, split_heads, merge_heads, CausalSelfAttention,
    copy_heads_into, quiz_head_width, quiz_attention_memory)
from .s06_complexity_and_memory import (attention_flops, attention_weights_bytes, quiz_complexity,
    tiled_attention)
from .s07_gqa_and_kv_cache import (repeat_kv, KVCache, GroupedQueryAttention, kv_cache_bytes, quiz_kv_cache)
from .s08_ffn_norm_residual import (RMSNorm, layer_norm, FeedForward, SwiGLU, quiz_ffn_share, Block)
from .s09_rope import (rope_angles, apply_rope, apply_rope_interleaved, quiz_rope)
from .s10_decoder_only_model import (DecoderLM, count_parameters, generate, top_p_filter)
from .s11_real_models_and_training import (quiz_read_config, quiz_misconceptions)
from .s12_what_heads_learn import (previous_token_score, induction_score, head_ablation_losses,
    quiz_induction_heads)
from .s13_long_context_attention import (sliding_window_mask, RollingKVCache, MultiHeadLatentAttention,
    latent_queries, mla_cache_bytes, quiz_long_context)

__all__ = ['Block', 'CausalSelfAttention', 'DecoderLM', 'FeedForward', 'GroupedQueryAttention', 'Head',
    'KVCache', 'MultiHeadAttention', 'MultiHeadLatentAttention', 'RMSNorm', 'RollingKVCache', 'SwiGLU',
    'apply_rope', 'apply_rope_interleaved', 'attention', 'attention_flops', 'attention_scores',
    'attention_weights_bytes', 'causal_mask', 'combine_masks', 'copy_heads_into', 'count_parameters',
    'dot_product_variance', 'generate', 'head_ablation_losses', 'induction_score', 'is_causal',
    'kv_cache_bytes', 'latent_queries', 'layer_norm', 'masked_softmax', 'merge_heads', 'mla_cache_bytes',
    'padding_mask', 'previous_token_score', 'project_qkv', 'quiz_attention_memory', 'quiz_complexity',
    'quiz_ffn_share', 'quiz_head_width', 'quiz_induction_heads', 'quiz_kv_cache', 'quiz_long_context',
    'quiz_misconceptions', 'quiz_read_config', 'quiz_rope', 'repeat_kv', 'rope_angles',
    'scaled_attention_scores', 'sliding_window_mask', 'softmax', 'softmax_jacobian', 'split_heads',
    'tensor_shape_quiz', 'tiled_attention', 'top_p_filter']
