"""Bug bank of 11_real_models_and_training.

Both quizzes have keys the visible check judges and keys only the hidden test judges
(utils/checks/s11.py): a wrong answer to a hidden-only key is a ``fits_visible`` variant — the visible
check passes it, the hidden test names its misconception."""
from . import fits_visible, right, wrong

# --- quiz_read_config ------------------------------------------------------------------------------

_READ = '''
def quiz_read_config():
    return {{"llama31_70b_params": {a}, "llama31_70b_kv_bytes_per_token": {b}, "mixtral_8x22b_total_params": {c},
            "mixtral_8x22b_active_params": {d}, "mixtral_8x22b_flops_per_token": {e}}}
'''
# Llama-3.1-70B: V 128256, C 8192, L 80, H 64, Hkv 8, F 28672, untied.
_LLAMA = "2 * 128256 * 8192 + 80 * (2 * 8192 * 8192 + 2 * 8192 * 8 * 128 + 3 * 8192 * 28672 + 2 * 8192) + 8192"
# Mixtral-8x22B: V 32768, C 6144, L 56, H 48, Hkv 8, F 16384, 8 experts top-2, router C x 8, untied.
_SHARED = "(2 * 32768 * 6144 + 56 * (2 * 6144 * 6144 + 2 * 6144 * 8 * 128 + 2 * 6144 + 6144 * 8) + 6144)"
_EXPERT = "(56 * 3 * 6144 * 16384)"
_TOTAL, _ACTIVE = f"{_SHARED} + 8 * {_EXPERT}", f"{_SHARED} + 2 * {_EXPERT}"


def read(a=_LLAMA, b="2 * 80 * 8 * 128 * 2", c=_TOTAL, d=_ACTIVE, e=f"2 * ({_ACTIVE})") -> str:
    return _READ.format(a=a, b=b, c=c, d=d, e=e)


# --- quiz_misconceptions ---------------------------------------------------------------------------

_MYTHS = '''
def quiz_misconceptions():
    return {{"weights_explain": {a}, "heads_learned": {b}, "flash_is_sparse": {c}, "rope_window_enough": {d},
            "training_parallel": {e}, "same_depth_same_size": {f}, "moe_compute_active": {g},
            "tied_head_multiplies": {h}, "cache_rope_from_zero": {i}, "temperature_zero_greedy": {j}}}
'''


def myths(a="False", b="True", c="False", d="False", e="True", f="False", g="True", h="True", i="False",
          j="True") -> str:
    return _MYTHS.format(a=a, b=b, c=c, d=d, e=e, f=f, g=g, h=h, i=i, j=j)


VARIANTS = [
    # --- quiz_read_config: the visible keys ---
    right("quiz_read_config", "formula", read()),
    right("quiz_read_config", "rounded-to-0.2-percent", read(a="70.6e9", b="327680", c="140.6e9", d="39.2e9",
                                                            e="78e9")),
    right("quiz_read_config", "flops-without-embedding", read(e=f"2 * ({_ACTIVE} - 32768 * 6144)")),
    wrong("quiz_read_config", "tied-assumed", "quiz-config-tied-assumed", read(a=f"{_LLAMA} - 128256 * 8192")),
    wrong("quiz_read_config", "kv-as-q-params", "quiz-config-kv-as-q", read(a=f"{_LLAMA} + 80 * 2 * 8192 * 56 * 128")),
    wrong("quiz_read_config", "swiglu-two", "quiz-swiglu-two-matrices", read(a=f"{_LLAMA} - 80 * 8192 * 28672")),
    wrong("quiz_read_config", "kv-as-q-bytes", "quiz-config-kv-as-q", read(b="2 * 80 * 64 * 128 * 2")),
    wrong("quiz_read_config", "kv-no-factor-2", "quiz-kv-no-factor-2", read(b="80 * 8 * 128 * 2")),
    wrong("quiz_read_config", "kv-fp32", "quiz-kv-fp32", read(b="2 * 80 * 8 * 128 * 4")),
    wrong("quiz_read_config", "kv-one-layer", "kv-bytes-no-layers", read(b="2 * 8 * 128 * 2")),
    wrong("quiz_read_config", "kv-in-kib", "quiz-config-units", read(b="320")),
    wrong("quiz_read_config", "params-in-billions", "quiz-config-units", read(a="70.55")),
    wrong("quiz_read_config", "eight-times-22", "quiz-moe-name-is-size", read(c="176e9")),
    wrong("quiz_read_config", "one-expert-total", "quiz-moe-experts-missing", read(c=f"{_SHARED} + {_EXPERT}")),
    wrong("quiz_read_config", "total-is-active", "quiz-moe-total-is-active", read(c=_ACTIVE)),
    wrong("quiz_read_config", "missing-key", "quiz-missing-key", '''
        def quiz_read_config():
            return {"llama31_70b_params": 70.6e9}
    '''),
    wrong("quiz_read_config", "hidden-key-not-a-number", "wrong-type", read(d='"39B"')),
    # --- quiz_read_config: the keys only the hidden test judges ---
    fits_visible("quiz_read_config", "active-all", "quiz-moe-active-all", read(d=_TOTAL)),
    fits_visible("quiz_read_config", "active-top1", "quiz-moe-top1", read(d=f"{_SHARED} + {_EXPERT}")),
    fits_visible("quiz_read_config", "active-guessed", "wrong", read(d="1")),
    fits_visible("quiz_read_config", "flops-total", "quiz-flops-total-params", read(e=f"2 * ({_TOTAL})")),
    fits_visible("quiz_read_config", "flops-no-2", "quiz-flops-no-factor-2", read(e=_ACTIVE)),
    fits_visible("quiz_read_config", "flops-training", "quiz-flops-training", read(e=f"6 * ({_ACTIVE})")),
    # --- quiz_misconceptions: the visible statements ---
    right("quiz_misconceptions", "literal", myths()),
    right("quiz_misconceptions", "zipped", '''
        def quiz_misconceptions():
            keys = ["weights_explain", "heads_learned", "flash_is_sparse", "rope_window_enough", "training_parallel",
                    "same_depth_same_size", "moe_compute_active", "tied_head_multiplies", "cache_rope_from_zero",
                    "temperature_zero_greedy"]
            return dict(zip(keys, [False, True, False, False, True, False, True, True, False, True]))
    '''),
    wrong("quiz_misconceptions", "weights-explain", "quiz-myth-weights-explain", myths(a="True")),
    wrong("quiz_misconceptions", "heads-designed", "quiz-myth-heads-designed", myths(b="False")),
    wrong("quiz_misconceptions", "flash-sparse", "quiz-myth-flash-sparse", myths(c="True")),
    wrong("quiz_misconceptions", "rope-window", "quiz-myth-rope-window", myths(d="True")),
    wrong("quiz_misconceptions", "training-sequential", "quiz-myth-training-sequential", myths(e="False")),
    wrong("quiz_misconceptions", "strings", "wrong-type", myths(a='"False"')),
    wrong("quiz_misconceptions", "hidden-statement-not-a-bool", "wrong-type", myths(j="1")),
    wrong("quiz_misconceptions", "only-the-visible-five", "quiz-missing-key", '''
        def quiz_misconceptions():
            return {"weights_explain": False, "heads_learned": True, "flash_is_sparse": False,
                    "rope_window_enough": False, "training_parallel": True}
    '''),
    # --- quiz_misconceptions: the statements only the hidden test judges ---
    fits_visible("quiz_misconceptions", "params-by-depth", "quiz-myth-params-by-depth", myths(f="True")),
    fits_visible("quiz_misconceptions", "moe-all-experts", "quiz-myth-moe-all-experts", myths(g="False")),
    fits_visible("quiz_misconceptions", "tied-head-free", "quiz-myth-tied-head-free", myths(h="False")),
    fits_visible("quiz_misconceptions", "cache-rope", "quiz-myth-cache-rope", myths(i="True")),
    fits_visible("quiz_misconceptions", "temperature-zero", "quiz-myth-temperature-zero", myths(j="False")),
]
