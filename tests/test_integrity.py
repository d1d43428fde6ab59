"""The integrity scan (autograder/integrity.py) line by line: what honest students write passes,
what changes the environment the checks rely on is found, and no bug-bank variant (every one is
code a student might write) is mistaken for either. (Through real grading:
tests/test_honest_submissions.py, tests/test_bad_submissions.py and tests/test_grading.py.)"""
from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest
from traitlets.config import Config

from autograder import preprocessors
from autograder.config import TEXT_STUB
from autograder.integrity import CourseBindings, borrowed, check_names, course_bindings, imported_checks, scan
from autograder.notebook_format import cell_kind, exercises, read
from autograder.preprocessors import IntegrityCheck
from utils import notebook

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
    "cell = check_project_qkv.__closure__[0]\ncell.cell_contents = f",
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


def _course_cells(nb: dict) -> list[str]:
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code" and cell_kind(c) != "solution"]


def _section_checks() -> dict[str, tuple[set[str], object, CourseBindings]]:
    """exercise -> (the exercises of its notebook, the check names its notebook protects, what its
    course cells bind to the reference)."""
    found = {}
    for section in SECTIONS:
        nb = load_notebook("notebooks", section)
        code, names = _course_cells(nb), set(exercises(nb))
        found.update({name: (names, check_names(imported_checks(code)), course_bindings(code, names))
                      for name in names})
    return found


SECTION_CHECKS = _section_checks()


@pytest.mark.parametrize("variant", all_variants(), ids=lambda v: v.id)
def test_no_bug_bank_variant_is_taken_for_tampering_or_for_the_reference(variant):
    """What grading's IntegrityCheck does with a solution cell, for every variant of the bank (the
    graded runs of tests/test_grading.py give each exercise's right variants the remaining places)."""
    names, protected, course = SECTION_CHECKS[variant.exercise]
    assert scan(variant.source, protected) == []
    assert borrowed({e: variant.source if e == variant.exercise else "" for e in names}, [], course) == {}


def test_the_released_notebook_is_parsed_once_per_version_of_the_file(tmp_path, monkeypatch):
    """IntegrityCheck reads the released notebook once per grading process (every student after the
    first is a cache hit), and again when it changes."""
    config = Config()
    config.CourseDirectory.root = str(tmp_path)
    config.CourseDirectory.release_directory = "notebooks"
    released = tmp_path / "notebooks" / "s" / "s.ipynb"
    released.parent.mkdir(parents=True)
    resources = {"nbgrader": {"assignment": "s", "notebook": "s"}}
    reads = []
    monkeypatch.setattr(preprocessors, "read", lambda path: reads.append(path) or read(path))
    check = IntegrityCheck(config=config)
    for version, imported in enumerate((["check_a"], ["check_b", "check_c"]), start=1):
        code = f"from utils.checks import {', '.join(imported)}"
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)]), released)
        for _ in range(3):  # three students
            assert check._released(resources)[:2] == ({code}, set(imported))
        assert len(reads) == version, f"read {len(reads)} times for {version} version(s) of the file"
    released.unlink()
    assert check._released(resources) == (set(), set(), CourseBindings()), "a missing release notebook"


# --- names the course's own cells bind to the reference -----------------------------------------------

SECTION_08 = "08_ffn_norm_residual"
BLOCK_08 = load_notebook("notebooks", SECTION_08)
COURSE_08 = course_bindings(_course_cells(BLOCK_08), exercises(BLOCK_08))
HONEST_BLOCK = """class Block(nn.Module):
    def __init__(self, n_embed, n_head, context_length, ffn_hidden=None):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(n_embed), RMSNorm(n_embed)
        self.attn = CausalSelfAttention(n_embed, n_head, context_length)
        self.ffn = SwiGLU(n_embed, ffn_hidden or 4 * n_embed)

    def forward(self, x, BlockImpl=None):       # a parameter that happens to share a course name
        ReferenceBlock = self.attn               # and a local one
        return x + ReferenceBlock(self.norm1(x)) + self.ffn(self.norm2(x))"""


def _borrowed_08(block: str, course: CourseBindings = COURSE_08) -> dict:
    return borrowed({**dict.fromkeys(exercises(BLOCK_08), "pass"), "Block": block}, [], course)


def test_the_course_cells_of_section_08_bind_the_reference_block_and_the_mine_or_reference_names():
    assert {"BlockImpl", "SwiGLUImpl", "RMSNormImpl"} <= COURSE_08.names
    assert COURSE_08.names & {"ReferenceBlock", "reference_block"}, "the cell counting the reference's parameters"
    assert "CausalSelfAttention" not in COURSE_08.names, "section 05's component is a given building block"


# A course cell of 08 that brings in the reference Block (as released, and as the import moved into a
# function) -> how a solution writes the reference class then.
BLOCK_REFERENCES = {
    "from utils.reference import Block as ReferenceBlock": "ReferenceBlock",
    "def reference_block(C):\n    from utils.reference import Block\n    return Block(C, 4, 32)":
        "type(reference_block(8))",
}
BORROWING_BLOCKS = [
    "class Block({ref}):\n    pass",
    "Block = {ref}",
    "class Block(nn.Module):\n    def __init__(self, *args):\n        super().__init__()\n"
    "        self.inner = {ref}(*args)\n\n    def forward(self, x):\n        return self.inner(x)",
]


@pytest.mark.parametrize("course_cell", BLOCK_REFERENCES)
@pytest.mark.parametrize("template", BORROWING_BLOCKS)
def test_an_exercise_using_a_name_the_course_bound_to_its_reference_is_borrowed(course_cell, template):
    block = template.format(ref=BLOCK_REFERENCES[course_cell])
    course = course_bindings([*_course_cells(BLOCK_08), course_cell], exercises(BLOCK_08))
    found = _borrowed_08(block, course)
    assert set(found) == {"Block"} and found["Block"].line in block
    assert _borrowed_08(block, CourseBindings()) == {}, "only the course cell's binding makes it borrowed"


def test_an_exercise_using_a_mine_or_reference_name_of_the_course_is_borrowed():
    found = _borrowed_08(HONEST_BLOCK.replace("SwiGLU(n_embed", "SwiGLUImpl(n_embed"))
    assert set(found) == {"Block"} and "SwiGLUImpl" in found["Block"].line


def test_the_given_building_blocks_and_own_names_are_not_borrowing():
    assert _borrowed_08(HONEST_BLOCK) == {}


def test_the_reference_module_and_aliases_bound_by_course_cells_are_followed():
    course = course_bindings(["import utils.reference as R\nX = R.Block\nclass Sub(X):\n    pass",
                              "from utils import reference as ref\nimpl = mine_or_reference('Block', Block)"],
                             ["Block", "RMSNorm"])
    assert course == CourseBindings(frozenset({"X", "Sub", "impl"}), frozenset({"R", "ref"}))
    solutions = {"RMSNorm": "pass"}
    for block in ("Block = R.Block", "Block = ref.Block", "Block = Sub", "Block = impl",
                  "Block = utils.reference.Block"):
        assert set(borrowed({**solutions, "Block": block}, [], course)) == {"Block"}, block
    assert borrowed({**solutions, "Block": "from torch import nn\nBlock = R.Head  # an earlier section's"},
                    [], course) == {}


# --- utils/ is the learner's side: it imports nothing of the grader -----------------------------------------

def test_utils_imports_nothing_from_autograder():
    root = Path(__file__).resolve().parents[1] / "utils"
    offenders = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            offenders += [f"{path.relative_to(root.parent)}: {m}" for m in modules if m.split(".")[0] == "autograder"]
    assert offenders == []


def test_the_answer_stub_is_the_one_nbgrader_writes():
    assert notebook.TEXT_STUB == TEXT_STUB
