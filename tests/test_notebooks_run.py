"""Every solution notebook runs top-to-bottom headless within its budget and every check passes.

The solution notebooks run as a learner's Run All does (figures drawn). The learner notebooks run
top to bottom where grading runs them: tests/test_grading.py grades each one untouched, as released
(demos included, under NBGRADER_EXECUTION as nbgrader's Validate button and autograding set it:
timing sweeps and training shrink), and asserts that only its stubs' test cells fail, kindly; the
browser test (tests/test_browser.py) runs two of them with Run All in JupyterLab, figures drawn. So
each way a notebook is run is tested, and the suite does not train section 11's models twice in full."""
from __future__ import annotations

import pytest

from autograder.execute import errors, execute, stream_text

from .conftest import SECTIONS, notebook_path

# Wall-clock seconds under the full suite (four pytest workers on two cores: about twice the idle time).
# 12 trains three models (two attention-only, 500 steps each, and 11's character model): 58 s idle.
BUDGET_SECONDS = {"00_start_here": 30, "01_qkv_and_scores": 30, "02_scaling_and_softmax": 30,
                  "03_single_head_attention": 30, "04_masks": 45, "05_multi_head_attention": 45,
                  "06_complexity_and_memory": 60, "07_gqa_and_kv_cache": 60, "08_ffn_norm_residual": 60,
                  "09_rope": 45, "10_decoder_only_model": 30,
                  "11_real_models_and_training": 90, "12_what_heads_learn": 150}


def test_every_section_has_a_budget():
    assert set(SECTIONS) <= set(BUDGET_SECONDS)


@pytest.mark.slow
@pytest.mark.parametrize("section", SECTIONS)
def test_solution_notebook_runs_and_passes_its_checks(section):
    nb, seconds = execute(notebook_path("solutions", section))
    assert not errors(nb)
    test_cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"]
    for cell in test_cells:
        if "HIDDEN TESTS" not in cell.source:
            assert "✓" in stream_text(cell), f"check cell printed no pass line: {cell.source!r}"
        assert not stream_text(cell, "stderr"), "stderr in a graded cell costs points in nbgrader"
    print(f"{section}: {seconds:.1f} s")
    assert seconds <= BUDGET_SECONDS[section], f"{section} took {seconds:.1f} s"
