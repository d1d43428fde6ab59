"""The integrity scan (autograder/integrity.py) line by line: what honest students write passes,
what changes the environment the checks rely on is found, and no bug-bank variant (every one is
code a student might write) is mistaken for either. (Through real grading:
tests/test_honest_submissions.py, tests/test_bad_submissions.py and tests/test_grading.py.)"""
from __future__ import annotations

import nbformat
import pytest
from traitlets.config import Config

from autograder.integrity import borrowed, check_names, imported_checks, scan
from autograder.notebook_format import cell_kind, exercises
from autograder.preprocessors import IntegrityCheck

from .bugbank import all_variants
from .conftest import SECTIONS, load_notebook

CHECKS = check_names(["check_project_qkv"])

HONEST = [
    "for m in self.modules():\n    if isinstance(m, nn.Linear):\n        nn.init.zeros_(m.bias)",
    "model.apply(init_weights)\nsd = model.state_dict()\nprint([n for n, _ in model.named_modules()])",
    "print(x.__dict__, vars(model).keys())",
    "import inspect\nprint(inspect.signature(project_qkv))",
    "import gc\ngc.collect()",
    "print(sorted(globals())[:5])",
    "%timeit project_qkv(x, w, w, w)",
    "%%time\ny = project_qkv(x, w, w, w)",
    "%matplotlib inline",
    "from utils.plotting import heatmap",
    "def check_my_shapes(y):\n    assert y.shape == (2, 3)",
    "setattr(self, 'scale', 0.5)",
    "self.__dict__.update(kwargs)",
    "model = torch.compile(model)\nimport re\npattern = re.compile('a+')",
    "from utils.checks import check_project_qkv, check_attention_scores",
]

HOSTILE = [
    "torch.allclose = lambda *a, **k: True",
    "import builtins as b\nb.print = print_nothing",
    "vars(torch)['allclose'] = f",
    "getattr(torch, 'testing').assert_close = f",
    "__import__('torch').allclose = f",
    "setattr(torch, 'allclose', f)",
    "import sys\nsys.modules['torch'] = fake",
    "sys.modules.update(torch=fake)",
    "def print(*args):\n    pass",
    "def check_project_qkv(f):\n    pass",
    "globals()['check_project_qkv'] = f",
    "globals().update(check_project_qkv=f)",
    "from utils.checks import check_attention_scores as check_project_qkv",
    "check_project_qkv.__code__ = other.__code__",
    "get_ipython().set_custom_exc((Exception,), handler)",
    "get_ipython().ast_transformers.append(rewrite)",
    "get_ipython().user_ns['check_project_qkv'] = f",
    "exec('torch.allclose = f')",
    "exec('torch.all' + 'close = f')",
    "%time torch.allclose = f",
    "import importlib\nimportlib.reload(utils.checks.core)",
    "import ctypes",
]


@pytest.mark.parametrize("source", HONEST)
def test_honest_code_is_not_flagged(source):
    assert scan(source, CHECKS) == []


@pytest.mark.parametrize("source", HOSTILE)
def test_code_that_changes_what_the_checks_rely_on_is_flagged(source):
    assert [f.code for f in scan(source, CHECKS)][:1] == ["tampered"]


def test_the_notebooks_own_checks_are_protected():
    assert imported_checks(["from utils.checks import (check_project_qkv,\n    check_attention_scores)"]) == \
        {"check_project_qkv", "check_attention_scores"}


MHA = "class MultiHeadAttention(nn.Module):\n    def forward(self, x):\n        return x"


def test_a_demo_cell_importing_the_reference_under_another_name_borrows_nothing():
    demo = "from utils.reference import MultiHeadAttention as ReferenceMHA\nm = ReferenceMHA(8, 2, 4)"
    assert borrowed({"MultiHeadAttention": MHA}, [demo, "from utils.reference import Head"]) == {}


def test_an_exercise_whose_own_code_uses_the_reference_is_borrowed():
    helper = "from utils.reference import split_heads as _ref\ndef _mine(x, n):\n    return _ref(x, n)"
    found = borrowed({"MultiHeadAttention": MHA, "split_heads": "def split_heads(x, n):\n    return _mine(x, n)"},
                     [helper])
    assert set(found) == {"split_heads"} and found["split_heads"].line == "return _mine(x, n)"
    assert set(borrowed({"split_heads": "from utils.reference import split_heads"}, [])) == {"split_heads"}
    assert set(borrowed({"split_heads": "pass"}, ["from utils.reference import split_heads"])) == {"split_heads"}


def _section_checks() -> dict[str, tuple[set[str], object]]:
    """exercise -> (the exercises of its notebook, the check names its notebook protects)."""
    found = {}
    for section in SECTIONS:
        nb = load_notebook("notebooks", section)
        code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code" and cell_kind(c) != "solution"]
        names = set(exercises(nb))
        found.update({name: (names, check_names(imported_checks(code))) for name in names})
    return found


SECTION_CHECKS = _section_checks()


@pytest.mark.parametrize("variant", all_variants(), ids=lambda v: v.id)
def test_no_bug_bank_variant_is_taken_for_tampering_or_for_the_reference(variant):
    """What grading's IntegrityCheck does with a solution cell, for every variant of the bank (the
    graded runs of tests/test_grading.py give each exercise's right variants the remaining places)."""
    names, protected = SECTION_CHECKS[variant.exercise]
    assert scan(variant.source, protected) == []
    assert borrowed({e: variant.source if e == variant.exercise else "" for e in names}, []) == {}


def test_the_released_notebook_is_parsed_once_per_version_of_the_file(tmp_path):
    """IntegrityCheck reads the released notebook once per grading process, and again when it changes."""
    config = Config()
    config.CourseDirectory.root = str(tmp_path)
    config.CourseDirectory.release_directory = "notebooks"
    released = tmp_path / "notebooks" / "s" / "s.ipynb"
    released.parent.mkdir(parents=True)
    resources = {"nbgrader": {"assignment": "s", "notebook": "s"}}
    check = IntegrityCheck(config=config)
    for imported in (["check_a"], ["check_b", "check_c"]):
        code = f"from utils.checks import {', '.join(imported)}"
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)]), released)
        assert check._released(resources) == ({code}, set(imported))
    released.unlink()
    assert check._released(resources) == (set(), set()), "a missing release notebook: every cell is scanned"
