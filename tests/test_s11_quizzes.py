"""Section 11's quizzes: the hidden-only keys stay hidden, and the numbers the checks hold agree with
transformers' own count (when the course environment has transformers)."""
from __future__ import annotations

import math

import pytest
import torch

from utils import reference
from utils.checks import oracle, s11
from utils.demos import s11 as demos


def _record_visible_checks() -> dict:
    with oracle.recording() as store:
        s11.check_quiz_read_config(reference.quiz_read_config)
        s11.check_quiz_misconceptions(reference.quiz_misconceptions)
    return store.get("s11", {})


def test_class_edition_stores_no_digest_of_a_hidden_key():
    """What the build stores for the class edition comes from the visible calls: only visible keys."""
    stored_keys = {key for result in _record_visible_checks().values() if isinstance(result, dict) for key in result}
    assert stored_keys == set(s11.VISIBLE_READ_KEYS) | set(s11.VISIBLE_MYTH_KEYS)


def test_hidden_test_judges_every_key():
    keys = s11.read_config_keys(s11.READ_KEYS)
    assert set(keys) == set(s11.READ_KEYS) and set(s11.myths_keys(s11.MYTH_KEYS)) == set(s11.MYTH_KEYS)


@pytest.mark.slow
def test_truths_agree_with_transformers_meta_models():
    pytest.importorskip("transformers")
    # The modelling modules themselves, not transformers' lazy top-level names: where an import fails,
    # the error names its real cause instead of "Could not import module 'LlamaForCausalLM'".
    from transformers.models.llama.modeling_llama import LlamaConfig, LlamaForCausalLM
    from transformers.models.mixtral.modeling_mixtral import MixtralConfig, MixtralForCausalLM
    truth = s11.read_config_truth()
    llama, moe = s11.LLAMA31_70B, s11.MIXTRAL_8X22B
    common = dict(tie_word_embeddings=False)
    with torch.device("meta"):
        hf_llama = LlamaForCausalLM(LlamaConfig(
            vocab_size=llama.vocab_size, hidden_size=llama.n_embed, intermediate_size=llama.ffn_hidden,
            num_hidden_layers=llama.n_layer, num_attention_heads=llama.n_head, num_key_value_heads=llama.n_kv_head,
            **common)).num_parameters()
        hf_moe = MixtralForCausalLM(MixtralConfig(
            vocab_size=moe.vocab_size, hidden_size=moe.n_embed, intermediate_size=moe.ffn_hidden,
            num_hidden_layers=moe.n_layer, num_attention_heads=moe.n_head, num_key_value_heads=moe.n_kv_head,
            num_local_experts=s11.N_EXPERT, num_experts_per_tok=s11.TOP_K, **common)).num_parameters()
    assert truth["llama31_70b_params"][0] == hf_llama
    assert truth["mixtral_8x22b_total_params"][0] == hf_moe
    assert round(hf_llama / 1e9, 1) == 70.6 and round(hf_moe / 1e9) == 141       # the published sizes
    assert round(truth["mixtral_8x22b_active_params"][0] / 1e9) == 39


@pytest.mark.slow
def test_llama3_rope_scaling_matches_transformers():
    pytest.importorskip("transformers")
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    scaling = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
    hf, _ = ROPE_INIT_FUNCTIONS["llama3"](LlamaConfig(hidden_size=2048, num_attention_heads=32, rope_theta=500000.0,
                                                      rope_scaling=scaling), "cpu")
    ours = demos.llama3_frequencies(demos.rope_frequencies(64, 500000.0), factor=32.0, low_freq_factor=1.0,
                                    high_freq_factor=4.0, original_context=8192)
    assert torch.allclose(ours.double(), hf.double(), rtol=1e-5, atol=0)
    wrong = demos.rope_frequencies(64, 500000.0) / 32                   # every frequency interpolated
    assert not torch.allclose(wrong.double(), hf.double(), rtol=1e-5, atol=0)
    assert math.isclose(float(ours[0]), 1.0)                             # the highest frequency is kept
