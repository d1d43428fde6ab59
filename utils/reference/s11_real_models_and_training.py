# Generated from solutions/11_real_models_and_training/11_real_models_and_training.ipynb
# by `python3 course.py build`. Do not edit: edit the notebook.
"""Reference implementations of section 11_real_models_and_training (the solution cells of its notebook)."""


__all__ = ['quiz_read_config', 'quiz_misconceptions']


def quiz_read_config():
    """Numbers read from two published configs: Llama-3.1-70B (dense) and Mixtral-8x22B (MoE).

    Return a dict with five numbers; the visible check judges the first three, only the hidden test the last two:
    "llama31_70b_params":             parameters of Llama-3.1-70B
    "llama31_70b_kv_bytes_per_token": its KV-cache bytes per token (bfloat16, all layers)
    "mixtral_8x22b_total_params":     parameters of Mixtral-8x22B, all experts
    "mixtral_8x22b_active_params":    parameters one token of Mixtral-8x22B uses
    "mixtral_8x22b_flops_per_token":  forward FLOPs per token of Mixtral-8x22B, ≈ 2 × its active parameters
    """
    def dense(V, C, L, H, Hkv, ffn, router=0):
        """count_parameters of an untied model (one FFN of width ffn per block) plus a router per block."""
        Dh = C // H
        attention = 2 * C * H * Dh + 2 * C * Hkv * Dh                # q_proj, o_proj; k_proj, v_proj
        return 2 * V * C + L * (attention + 3 * C * ffn + 2 * C + router) + C

    expert = 3 * 6144 * 16384                                        # one SwiGLU expert of Mixtral-8x22B
    one_expert = dense(32768, 6144, 56, 48, 8, 16384, router=6144 * 8)
    active = one_expert + 56 * expert                                # top-2: one more expert per block
    return {
        "llama31_70b_params": dense(128256, 8192, 80, 64, 8, 28672),
        "llama31_70b_kv_bytes_per_token": 2 * 80 * 8 * 128 * 2,     # K and V × layers × KV heads × Dh × 2 bytes
        "mixtral_8x22b_total_params": one_expert + 56 * 7 * expert,
        "mixtral_8x22b_active_params": active,
        "mixtral_8x22b_flops_per_token": 2 * active,                 # ≈ 2 × active parameters
    }


def quiz_misconceptions():
    """True (the statement is right) or False (it is wrong) for each of the ten statements above.

    Return a dict with ten bools.
    Judged by the visible check:    "weights_explain", "heads_learned", "flash_is_sparse", "rope_window_enough",
                                    "training_parallel"
    Judged only by the hidden test: "same_depth_same_size", "moe_compute_active", "tied_head_multiplies",
                                    "cache_rope_from_zero", "temperature_zero_greedy"
    """
    return {
        "weights_explain": False,          # a weight is a mixing proportion, not a cause (section 03 §7)
        "heads_learned": True,             # every head has the same structure; training gives them roles (05 §7.1)
        "flash_is_sparse": False,          # the same function, computed in blocks (06 §5)
        "rope_window_enough": False,       # a longer window does not guarantee long-range ability (09 §8, §3.2)
        "training_parallel": True,         # teacher forcing + the causal mask: all positions at once (04 §3)
        "same_depth_same_size": False,     # Llama-2-7B and Llama-3-8B: same L and C, vocab and FFN differ (§2)
        "moe_compute_active": True,        # only the top-k experts compute (§2)
        "tied_head_multiplies": True,      # tying shares the matrix; the LM head still multiplies by it (10 §3.1)
        "cache_rope_from_zero": False,     # RoPE positions start at the cache length too (10 §4)
        "temperature_zero_greedy": True,   # the convention of 10's generate (10 §6)
    }
