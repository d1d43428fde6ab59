"""is_causal is judged on probe functions the kernel builds from specs the judge chose: a candidate
that reads the probe instead of running it gets no mark, and the probes' truths never enter the kernel."""
from __future__ import annotations

import pytest
import torch

from utils.checks import s04

from .judging import judge_locally

# Reads the spec a probe would carry as attributes (kind, numbers) and answers from it, never perturbing.
READS_THE_PROBE = '''
def is_causal(fn, T=8, C=16):
    kind, numbers = getattr(fn, "kind", ""), getattr(fn, "numbers", (0, 0))
    if kind == "attention":
        return numbers[0] <= 0
    if kind == "leak":
        return numbers[0] <= numbers[1]
    return kind in ("cumsum", "positionwise", "conv")
'''


def _defined(source: str):
    namespace: dict = {}
    exec(source, namespace)
    return namespace["is_causal"]


@pytest.mark.parametrize("seed", [0, 5])
def test_a_candidate_reading_the_probe_gets_no_mark(seed):
    assert judge_locally("is_causal", _defined(READS_THE_PROBE), extended=True, seed=seed) is not None


def test_a_probe_shows_no_spec_by_name():
    fn = s04.probe("leak", 3, 1)
    assert not any(isinstance(getattr(fn, name, None), (str, tuple)) for name in ("kind", "numbers", "spec"))


@pytest.mark.parametrize("T", [3, 8])
def test_every_probe_is_as_causal_as_the_oracle_says(T):
    """The truth comes from the spec; perturbing the future of the probe the kernel builds agrees with it."""
    g = torch.Generator().manual_seed(T)
    x = torch.randn(2, T, 4, generator=g, dtype=torch.float64)
    for description, spec in s04.probes(T, seed=T):
        fn, leaks = s04.probe(*spec), False
        for t in range(T - 1):
            changed = x.clone()
            changed[:, t + 1:] = torch.randn(2, T - t - 1, 4, generator=g, dtype=torch.float64)
            leaks |= not torch.allclose(fn(changed)[:, : t + 1], fn(x)[:, : t + 1], rtol=0, atol=1e-12)
        assert leaks != s04.causal_truth(spec), description
