"""Honest submissions, written the way students write, get full marks through ``nbgrader autograde``.

The integrity scan (autograder/integrity.py) must not take points for code that only looks
unusual: weight-initialisation loops over ``self.modules()``, ``apply`` / ``named_modules`` /
``state_dict``, debugging prints and introspection (``__dict__``, ``inspect``, ``gc``,
``globals()``), ``%timeit``, an edited demo cell that imports the reference under another
name (05's counting demo rewritten to use ``ReferenceMHA``), extra helper cells and figures from
``utils.plotting``. Section 05 is graded: its exercises are ``nn.Module``s, as in every later
section. The hostile corpus that must keep scoring 0 is tests/test_bad_submissions.py.
"""
from __future__ import annotations

import copy

import pytest

from autograder.build import strip_markers

from .conftest import load_notebook
from .nbgrader_course import Course, with_solution

SECTION = "05_multi_head_attention"
REFERENCE_DEMO = "def reference_mha(C, H):"   # the counting demo, which imports the reference inside
HEAD_IMPORT = "from utils.reference import Head"

INIT_LOOPS = '''class MultiHeadAttention(nn.Module):
    def __init__(self, n_embed, n_head, context_length):
        super().__init__()
        self.heads = nn.ModuleList([Head(n_embed // n_head, n_embed, context_length) for _ in range(n_head)])
        self.proj = nn.Linear(n_embed, n_embed)
        self.apply(self._init_weights)
        for m in self.modules():                      # the usual initialisation loop
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, x):
        return self.proj(torch.cat([h(x) for h in self.heads], dim=-1))'''

STATE_DICT_HELPER = '''m = MultiHeadAttention(n_embed=8, n_head=2, context_length=4)
print([name for name, _ in m.named_modules()])
twin = MultiHeadAttention(n_embed=8, n_head=2, context_length=4)
twin.load_state_dict(m.state_dict())
x = torch.randn(1, 4, 8)
print("same output:", torch.allclose(m(x), twin(x)))
print(sum(p.numel() for p in m.parameters()), m.state_dict().keys())'''

DEBUG_PRINTS = '''import gc
import inspect

x = torch.randn(2, 5, 12)
print(inspect.signature(split_heads))
print(inspect.getsource(merge_heads))
print(MultiHeadAttention(12, 3, 8).__dict__.keys())
print(x.__dict__, type(x).__mro__)
print(sorted(k for k in globals() if k.endswith("heads")))
gc.collect()'''

TIMEIT = "x = torch.randn(2, 16, 64)\n%timeit -n 20 -r 3 merge_heads(split_heads(x, 8))"
CELL_TIME = "%%time\ny = merge_heads(split_heads(torch.randn(2, 16, 64), 8))\nprint(y.shape)"

SPLIT_WITH_HELPER = '''def split_heads(x, n_head):
    B, T, C = x.shape
    return _heads_view(x, n_head).transpose(1, 2)   # (B, T, H, Dh) -> (B, H, T, Dh)'''
HELPER = '''def _heads_view(x, n_head):
    """My helper: (B, T, C) -> (B, T, H, Dh)."""
    B, T, C = x.shape
    return x.view(B, T, n_head, C // n_head)'''

EDITED_DEMO = '''from utils.reference import MultiHeadAttention as ReferenceMHA   # I changed the sizes

for H in (1, 2):
    m = ReferenceMHA(n_embed=8, n_head=H, context_length=4)
    print(H, sum(p.numel() for p in m.parameters()))'''

PLOT = '''from utils.plotting import heatmap

fig, ax = plt.subplots(figsize=(3, 3))
heatmap(ax, torch.softmax(torch.randn(4, 4), dim=-1), "my weights")
plt.close(fig)'''


def solutions() -> dict[str, str]:
    """exercise -> the source notebook's solution (without the nbgrader markers)."""
    return {c["metadata"]["nbgrader"]["grade_id"]: strip_markers(c["source"])
            for c in load_notebook("solutions", SECTION)["cells"]
            if c["metadata"].get("nbgrader", {}).get("solution") and c["cell_type"] == "code"}


def full_marks() -> dict[str, float]:
    return {c["metadata"]["nbgrader"]["grade_id"]: c["metadata"]["nbgrader"]["points"]
            for c in load_notebook("solutions", SECTION)["cells"]
            if c["metadata"].get("nbgrader", {}).get("grade_id", "").startswith("test_")}


def code_cell(source: str) -> dict:
    return {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": source}


def submission(release: dict, own: dict[str, str], after: dict[str, list[str]], demo: str = REFERENCE_DEMO) -> dict:
    """The released notebook with every exercise solved (``own`` replaces some solutions), the
    cells in ``after[exercise]`` inserted after that exercise's solution cell, the demo cell that
    imports the reference replaced by ``demo``; other demo cells are left out (they cost seconds)."""
    nb = copy.deepcopy(release)
    keep = []
    for i, cell in enumerate(nb["cells"]):
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
        source = "".join(cell["source"])
        first_code = cell["cell_type"] == "code" and not any(c["cell_type"] == "code" for c in nb["cells"][:i])
        if cell["cell_type"] == "code" and REFERENCE_DEMO in source:
            cell["source"] = demo
        elif not (grade_id or first_code or HEAD_IMPORT in source or cell["cell_type"] == "markdown"):
            continue
        keep.append(cell)
        keep += [code_cell(source) for source in after.get(grade_id, [])]
    nb["cells"] = keep
    for exercise, source in {**solutions(), **own}.items():
        nb = with_solution(nb, exercise, source)
    return nb


@pytest.mark.slow
def test_honest_submissions_get_full_marks(tmp_path):
    course = Course.create(tmp_path / "course", [SECTION])
    release = course.release_notebook(SECTION)
    students = {  # two students (each costs seconds), each idiom in one of them
        "init-loops-and-debugging": submission(release, {"MultiHeadAttention": INIT_LOOPS},
                                               {"MultiHeadAttention": [STATE_DICT_HELPER],
                                                "merge_heads": [DEBUG_PRINTS, TIMEIT, CELL_TIME]}),
        "edited-demo-and-helpers": submission(release, {"split_heads": SPLIT_WITH_HELPER},
                                              {"MultiHeadAttention": [PLOT, HELPER]}, demo=EDITED_DEMO),
    }
    for student, nb in students.items():
        assert sum(marker in "".join(c["source"]) for c in nb["cells"] for marker in (REFERENCE_DEMO, "ReferenceMHA")
                   ) == 1, "the demo cell is graded"
        course.submit(student, SECTION, nb)
    course.nbgrader("autograde", SECTION)
    course.nbgrader("generate_feedback", SECTION)

    scores, full = course.scores(SECTION), full_marks()
    for student in students:
        got = {g: scores[student][g] for g in full}
        assert got == full, f"{student} lost points: {got}"
        html = course.feedback_html(student, SECTION)
        assert "[tampered]" not in html and "[uses-reference]" not in html, student
