"""The class edition on another CPU: stored results recorded under one set of PyTorch's CPU kernels are found
and agree under another (a learner's laptop: AVX2, Apple silicon, or PyTorch's portable ``default`` kernels).

Each test runs tests/kernel_sets.py in a subprocess with ``ATEN_CPU_CAPABILITY`` set: ``default`` always, and
``avx2`` where the CPU has it and this process runs other kernels (an AVX-512 machine). Under the code before
issue 42 (oracles keyed by float bytes) the first test failed under ``default`` with 324 of 683 variants
``[check-data-missing]``, 26 of the 50 references among them.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from utils.checks.oracle import FIXTURES

from .conftest import ROOT
from .kernel_sets import load_store
from .test_editions import same_result

pytestmark = pytest.mark.slow


def _cpu_has(flag: str) -> bool:
    try:
        return any(flag in line.split() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("flags"))
    except OSError:
        return False


def _others() -> list[str]:
    """The kernel sets this machine can run besides its own."""
    own = torch.backends.cpu.get_cpu_capability()
    others = ["default"] if own != "DEFAULT" else []
    if own not in ("AVX2", "DEFAULT") and _cpu_has("avx2"):
        others.append("avx2")
    return others


def other_kernel_sets() -> list[str]:
    return _others() or pytest.skip("this CPU runs PyTorch's default kernels only")


def recording_kernel_sets() -> list[str]:
    """Where the stored results are recorded anew to compare with the committed ones: the other kernel sets, or
    this CPU's own where it has no other (then the test is the plain check that `course.py build` was run)."""
    return _others() or [torch.backends.cpu.get_cpu_capability().lower()]


def run_under(capability: str, *args: str) -> None:
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability}
    done = subprocess.run([sys.executable, "-m", "tests.kernel_sets", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("capability", other_kernel_sets())
def test_the_committed_results_answer_every_variant_under_other_kernels(capability, tmp_path):
    """Every bug-bank variant's visible check, answered from utils/checks/fixtures/ (recorded where the course
    was built) under ``capability``: the same code as the full course there, and the bank's expected code."""
    run_under(capability, "replay", str(FIXTURES), str(tmp_path / "codes.json"))
    report = json.loads((tmp_path / "codes.json").read_text(encoding="utf-8"))
    assert report["capability"] == capability.upper()
    codes = report["codes"]
    differ = [f"{name}: class edition {c['class']}, full course {c['full']}" for name, c in codes.items()
              if c["class"] != c["full"]]
    assert not differ, f"under {capability}:\n" + "\n".join(differ)
    wrong = [f"{name}: {c['full']}, expected {c['expected']}" for name, c in codes.items()
             if c["full"] != c["expected"]]
    assert not wrong, f"under {capability}:\n" + "\n".join(wrong)


@pytest.mark.parametrize("capability", recording_kernel_sets())
def test_results_recorded_under_other_kernels_are_the_committed_ones(capability, tmp_path):
    """utils/checks/fixtures/ is what `python3 course.py build` records now, under ``capability`` too: the same keys,
    and results within the checks' tolerances (a learner's machine builds nothing, but the keys it looks up are
    these). Recorded under another kernel set, this is also the plain check that the build was run after a check
    changed (as it is under this CPU's own where it has no other)."""
    run_under(capability, "record", str(tmp_path / "store.pt"))
    recorded, committed = load_store(tmp_path / "store.pt"), load_store(FIXTURES)
    assert sorted(recorded) == sorted(committed), "run `python3 course.py build`"
    for module, results in recorded.items():
        missing = sorted(set(committed[module]) ^ set(results))
        assert not missing, (f"{module}: keys recorded under {capability} and committed differ: {missing[:5]} "
                             "(run `python3 course.py build`)")
        differ = [key for key, value in results.items() if not same_result(value, committed[module][key])]
        assert not differ, f"{module}: results differ under {capability}: {differ[:5]} (run `python3 course.py build`)"
