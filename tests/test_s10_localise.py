"""check_DecoderLM localises a whole-model mismatch: the message names the part of the model that is wrong.

The bug bank asserts each variant's code; here the finding must also name the component (the first part
whose input matches the oracle's and whose output does not), as a debugger stepping through the model would
— in the notebook, and where the judge runs the check (the parts' inputs and outputs come back from the
kernel's hooks as data, through the protocol's codec).
"""
import contextlib
import io

import pytest
import torch

from tests.bugbank import load, s10
from tests.judging import EncodedDriver
from utils.checks import CheckError, agent, check_DecoderLM

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


def in_notebook(candidate) -> CheckError | None:
    try:
        check_DecoderLM(candidate)
    except CheckError as err:
        return err
    return None


def by_the_judge(candidate, seed: int = 11) -> CheckError | None:
    """The error of the judge's way of running the check: a fresh seed, every call and answer encoded."""
    try:
        with torch.random.fork_rng(devices=[]), agent.quiet(), contextlib.redirect_stdout(io.StringIO()):
            EncodedDriver("DecoderLM", candidate).run(check_DecoderLM.definition, False, seed)
    except CheckError as err:
        return err
    return None


@pytest.mark.parametrize("run", [in_notebook, by_the_judge], ids=["notebook", "judge"])
@pytest.mark.parametrize("label", sorted(NAMED))
def test_the_message_names_the_wrong_component(label, run):
    variant = VARIANTS[label]
    err = run(load(variant))
    assert err is not None, f"{label} passed"
    assert err.code == variant.expected
    assert NAMED[label] in str(err), str(err)


def test_a_right_model_passes_without_a_localised_finding():
    """Localisation runs only on a mismatch: every right variant passes, both ways."""
    right = [v for v in VARIANTS.values() if v.expected is None]
    assert len(right) >= 3, "the bank needs right variants written differently"
    failures = {v.label: err for v in right for err in (in_notebook(load(v)), by_the_judge(load(v))) if err}
    assert not failures, failures
