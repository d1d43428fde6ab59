"""check_DecoderLM localises a whole-model mismatch: the message names the part of the model that is wrong.

The bug bank asserts each variant's code; here the finding must also name the component (the first part
whose input matches the oracle's and whose output does not), as a debugger stepping through the model would.
"""
import pytest

from tests.bugbank import load, s10
from utils.checks import CheckError, check_DecoderLM

NAMED = {  # bug-bank variant -> the component its message must name
    "centred-norm-inside": "第 1 个 Block 的 norm2（RMSNorm）",
    "swiglu-swapped-inside": "第 1 个 Block 的 ffn（SwiGLU）",
    "rope-on-values": "第 1 个 Block 的 attn（带 RoPE 的注意力）",
    "no-rope": "第 1 个 Block 的 attn（带 RoPE 的注意力）",
    "no-causal-mask": "第 1 个 Block 的 attn（带 RoPE 的注意力）",
    "mask-not-offset": "第 1 个 Block 的 attn（带 RoPE 的注意力）",
    "cache-output-unused": "第 1 个 Block 的 attn（带 RoPE 的注意力）",
    "no-ffn-residual": "第 1 个 Block 的 ffn（SwiGLU）",
    "no-attention-residual": "第 1 个 Block 的 attn（带 RoPE 的注意力）",
    "residual-from-normed": "第 1 个 Block 的 norm2（RMSNorm）",
}
VARIANTS = {v.label: v for v in s10.VARIANTS if v.exercise == "DecoderLM"}


@pytest.mark.parametrize("label", sorted(NAMED))
def test_the_message_names_the_wrong_component(label):
    variant = VARIANTS[label]
    with pytest.raises(CheckError) as raised:
        check_DecoderLM(load(variant))
    assert raised.value.code == variant.expected
    assert NAMED[label] in str(raised.value), str(raised.value)


def test_a_right_model_is_not_localised():
    """Localisation runs only on a mismatch: the right variants pass untouched."""
    for variant in (v for v in VARIANTS.values() if v.expected is None):
        check_DecoderLM(load(variant))
