"""Generated files are in sync, committed notebooks are clean, nbgrader metadata is sound,
and the graded names are exactly the exercise contract."""
from __future__ import annotations

import ast
import json
import re
import tomllib

import pytest

from autograder import build
from autograder.notebook_format import (cell_kind, dumps, exercise_of, exercises, grade_id, pack, read, unpack,
                                        visible_and_hidden)
from utils.checks import CheckError
from utils.checks.codes import CODES, describe

from .conftest import ROOT, SECTIONS, load_notebook

# The exercise contract: the graded names of each section, in notebook order. References, stubs,
# checks and hidden tests all speak of these names, so they never change.
CONTRACT = {
    "00_start_here": ["tensor_shape_quiz"],
    "01_qkv_and_scores": ["project_qkv", "attention_scores"],
    "02_scaling_and_softmax": ["dot_product_variance", "scaled_attention_scores", "softmax", "softmax_jacobian"],
    "03_single_head_attention": ["attention", "Head"],
    "04_masks": ["causal_mask", "padding_mask", "combine_masks", "masked_softmax", "is_causal"],
    "05_multi_head_attention": ["MultiHeadAttention", "split_heads", "merge_heads", "CausalSelfAttention",
                                "copy_heads_into"],
    "06_complexity_and_memory": ["attention_flops", "attention_weights_bytes", "tiled_attention"],
    "07_gqa_and_kv_cache": ["repeat_kv", "KVCache", "GroupedQueryAttention", "kv_cache_bytes"],
    "08_ffn_norm_residual": ["RMSNorm", "layer_norm", "FeedForward", "SwiGLU", "Block"],
    "09_rope": ["rope_angles", "apply_rope", "apply_rope_interleaved"],
    "10_decoder_only_model": ["DecoderLM", "count_parameters", "generate", "top_p_filter"],
    "11_real_models_and_training": [],
    "12_what_heads_learn": ["previous_token_score", "induction_score", "head_ablation_losses"],
    "13_long_context_attention": ["sliding_window_mask", "RollingKVCache", "MultiHeadLatentAttention", "latent_queries",
                                  "mla_cache_bytes"],
}


def test_sections_are_contracted_ones():
    assert set(SECTIONS) <= set(CONTRACT), "a section folder that the contract does not name"


@pytest.mark.parametrize("section", SECTIONS)
def test_solution_cells_define_exactly_the_contract(section):
    nb = load_notebook("solutions", section)
    # The contract's names in order; a section may add numeric self-test questions named quiz_*.
    assert [n for n in exercises(nb) if not n.startswith("quiz_")] == CONTRACT[section]
    for cell in (c for c in nb["cells"] if cell_kind(c) == "solution"):
        tree = ast.parse(cell["source"])
        defined = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        public = [name for name in defined if not name.startswith("_")]  # private helpers of the exercise may join it
        assert public == [grade_id(cell)], "one public name per solution cell"
        assert "### BEGIN SOLUTION" in cell["source"] and "### END SOLUTION" in cell["source"]


@pytest.mark.parametrize("section", SECTIONS)
def test_nbgrader_metadata_is_well_formed(section):
    nb = load_notebook("solutions", section)
    ids = [grade_id(c) for c in nb["cells"] if "nbgrader" in c["metadata"]]
    assert len(ids) == len(set(ids)), "duplicate grade_id"
    names = exercises(nb)
    for cell in nb["cells"]:
        kind, meta = cell_kind(cell), cell["metadata"].get("nbgrader")
        if meta is None:
            continue
        assert meta["schema_version"] == 3
        assert re.fullmatch(r"[A-Za-z0-9_]+", meta["grade_id"])
        if kind == "test":
            assert cell["cell_type"] == "code" and meta["locked"] and meta["points"] > 0
            assert exercise_of(meta["grade_id"]) in names, meta["grade_id"]
            hidden = "### BEGIN HIDDEN TESTS" in cell["source"]
            assert hidden == meta["grade_id"].endswith("_hidden"), "hidden tests live in their own cell"
        elif kind == "answer":
            assert cell["cell_type"] == "markdown" and meta["points"] > 0
            assert meta["grade_id"].startswith("answer_")
        else:
            assert kind == "solution" and "points" not in meta
    for name in names:  # every exercise has a visible and a hidden test
        visible, hidden = visible_and_hidden(name)
        assert visible in ids, f"no visible test for {name}"
        if section != "00_start_here":
            assert hidden in ids, f"no hidden test for {name}"


@pytest.mark.parametrize("kind", ["solutions", "notebooks"])
def test_committed_notebooks_have_no_outputs(kind):
    for path in sorted((ROOT / kind).glob("*/*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        for cell in nb["cells"]:
            assert not cell.get("outputs") and not cell.get("execution_count"), f"{path} has outputs"


@pytest.mark.parametrize("section", SECTIONS)
def test_solution_notebook_is_canonical_and_round_trips(section):
    path = ROOT / "solutions" / section / f"{section}.ipynb"
    text = path.read_text(encoding="utf-8")
    assert dumps(pack(unpack(read(path)))) == text, "run `python3 course.py build` to normalize"


@pytest.mark.slow
def test_learner_notebooks_are_in_sync_with_solutions():
    for section, text in build.learner_notebooks().items():
        committed = ROOT / "notebooks" / section / f"{section}.ipynb"
        assert committed.exists() and committed.read_text(encoding="utf-8") == text, \
            f"{committed} is out of date: run `python3 course.py build`"
    assert sorted(p.name for p in (ROOT / "notebooks").iterdir() if p.is_dir()) == SECTIONS


def test_reference_package_and_docs_are_in_sync():
    for path, text in build.reference_files().items():
        assert path.exists() and path.read_text(encoding="utf-8") == text, \
            f"{path.relative_to(ROOT)} is out of date: run `python3 course.py build`"


def test_course_prose_carries_no_reference_answer():
    """utils/data/course_prose.txt (section 10's corpus, generated and kept in sync with the notebooks
    by the test above) ships in the learner's package: the manually graded answer cells, which hold
    the reference answers, must stay out of it."""
    text = (ROOT / "utils" / "data" / "course_prose.txt").read_text(encoding="utf-8")
    for section in SECTIONS:
        for cell in load_notebook("solutions", section)["cells"]:
            if cell_kind(cell) == "answer":
                lines = [line for line in build.prose_text(cell["source"]).splitlines() if len(line) > 30]
                assert lines and not any(line in text for line in lines), f"{section}: {grade_id(cell)}"


def test_reference_modules_import_their_siblings_not_the_package():
    """utils.reference.sNN must import on its own, whatever was imported before it."""
    for path in (ROOT / "utils" / "reference").glob("s*.py"):
        assert "from utils.reference import" not in path.read_text(encoding="utf-8"), path.name
    rewritten = build.relative_imports("from utils.reference import Head, attention  # 03\n",
                                       {"Head": "s03_x", "attention": "s03_x"})
    assert rewritten == "from .s03_x import Head, attention  # 03\n"
    with pytest.raises(ValueError):
        build.relative_imports("from utils.reference import Head, softmax", {"Head": "s03_x", "softmax": "s02_x"})


def _raised_codes(tree: ast.AST) -> set[str]:
    """The codes a module's checks can raise: CheckError's literal first argument, and the code of every
    (code, value) pair — the form ``expect``'s misconception lists and the quizzes' wrong answers take."""
    codes = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "CheckError":
            first = node.args[0] if node.args else None
            assert not isinstance(first, ast.JoinedStr), f"line {node.lineno}: a CheckError code built at run time"
            if isinstance(first, ast.Constant):
                codes.add(first.value)
        elif isinstance(node, ast.Tuple) and len(node.elts) == 2 and isinstance(node.elts[0], ast.Constant) \
                and isinstance(node.elts[0].value, str) and CODE_SHAPE.fullmatch(node.elts[0].value):
            codes.add(node.elts[0].value)
    return codes


CODE_SHAPE = re.compile(r"[a-z0-9]+(-[a-z0-9]+)+")


def test_the_code_scan_finds_literal_and_paired_codes():
    snippet = 'raise CheckError("made-up", "x")\nexpect(got, want, "w", [("also-made-up", t), ("not a code", 1)])\n'
    assert _raised_codes(ast.parse(snippet)) == {"made-up", "also-made-up"}
    with pytest.raises(AssertionError, match="run time"):
        _raised_codes(ast.parse('raise core.CheckError(f"x-{y}", "")'))


def test_every_code_a_check_can_raise_is_in_the_table():
    for path in sorted((ROOT / "utils" / "checks").glob("*.py")):
        missing = _raised_codes(ast.parse(path.read_text(encoding="utf-8"))) - set(CODES)
        assert not missing, f"{path.name} raises codes the table lacks: {sorted(missing)}"


def test_the_table_refuses_an_unknown_code():
    with pytest.raises(KeyError, match="no-such-code"):
        describe("no-such-code")
    with pytest.raises(KeyError):
        CheckError("no-such-code", "…")


# What a line to write looks like: a call with its arguments, a torch/F/nn call, a slice, an assignment
# from a call, a comparison in an if. A hint names the idea and where it was taught, never the line.
CODE_LINE = re.compile(r"\.\w+\([^)]*\)|\b(torch|F|nn|math)\.\w+\(|\w\[[^\]]*:[^\]]*\]|\w\s*=\s*\w+\("
                       r"|\bif \w+ *[=<>!]=")


def test_no_hint_hands_over_the_line_to_write():
    lines = {code: hint for code, (_, *hints) in CODES.items() for hint in hints if CODE_LINE.search(hint)}
    assert not lines, f"hints holding code: {lines}"
    assert CODE_LINE.search("用 self.tril[:T, :T]。") and CODE_LINE.search("if temperature == 0: 贪心")


def test_every_check_code_is_documented_and_used():
    sources = "".join(p.read_text(encoding="utf-8") for folder in ("utils/checks", "autograder")
                      for p in (ROOT / folder).glob("*.py") if p.name != "codes.py")
    raised = set(re.findall(r'"([A-Za-z0-9-]+)"', sources)) & set(CODES)
    unused = set(CODES) - raised - {"not-implemented", "crashed", "wrong"}
    assert not unused, f"codes no check can raise: {sorted(unused)}"


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = {re.split(r"[<>=!~ ]", d)[0].lower() for d in project["dependencies"]}
    env_text = (ROOT / "environment.yml").read_text(encoding="utf-8")
    assert "-e ." in env_text, "environment.yml must install the course package"
    assert "torch==2.13.0" in env_text, "environment.yml must pin the torch the course is tested with"
    assert "- --extra-index-url https://download.pytorch.org/whl/cpu" in env_text, "CPU torch, not several GB of CUDA"
    assert "- -c requirements.lock" in env_text, "the lockfile's versions, as course.py installs them"
    listed = {re.split(r"[<>=!~ ]", line.strip()[2:])[0].lower()
              for line in env_text.splitlines() if line.strip().startswith("- ") and ":" not in line}
    assert wanted <= listed, f"missing from environment.yml: {sorted(wanted - listed)}"


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "python3 course.py test" in readme and "python3 course.py test" in ci
    assert "python3 course.py lab" in readme


# --- study times: each notebook states its own; 00's map and the README repeat it and add them up ---------

def _map_rows(text: str) -> dict[str, str]:
    """{section number: its 预计用时 cell} from a Markdown section table whose last column is the time."""
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| (\d\d) \|.*\| 约 ([^|]+?) \|$", text, re.MULTILINE)}


def _hours(time: str) -> tuple[float, float]:
    """'1.5–2.25 小时' → (1.5, 2.25); '55–80 分钟' → (55/60, 80/60); '3 小时' → (3, 3)."""
    numbers = [float(n) for n in re.findall(r"\d+(?:\.\d+)?", time)]
    unit = 60 if "分钟" in time else 1
    return numbers[0] / unit, numbers[-1] / unit


def test_the_course_map_states_each_sections_own_study_time_and_their_sum():
    start = load_notebook("solutions", SECTIONS[0])
    map_text = "\n".join("".join(c["source"]) for c in start["cells"] if c["cell_type"] == "markdown")
    in_map = _map_rows(map_text)
    readme = _map_rows((ROOT / "README.md").read_text(encoding="utf-8"))
    assert sorted(in_map) == sorted(s[:2] for s in SECTIONS), "00's map lists every section with its time"
    assert readme == in_map, "the README's table states the same times as 00's map"
    for section in SECTIONS:
        intro = "".join("".join(c["source"]) for c in load_notebook("solutions", section)["cells"][:4])
        assert f"约 {in_map[section[:2]]}" in intro, f"{section}'s opening states the time the map gives it"
    low, high = (sum(_hours(t)[i] for t in in_map.values()) for i in (0, 1))
    total = re.search(r"全课合计约 (\d+)–(\d+) 小时", map_text)
    assert total and (int(total[1]), int(total[2])) == (round(low), round(high)), (low, high)
