"""A learner's JupyterLab in a real browser: JupyterLab on a copy of the course, driven through
Debian's Chromium by Playwright, as a learner would use it.

For each section below: open the learner notebook, run every cell (Run All stops at a failing
check; carry on from the first cell that did not run); the math is typeset, every figure is a
real image, Chinese is drawn with a Simplified Chinese font, the only errors are the stubs'
"尚未实现" checks; a slider redraws its figure in place; a right implementation typed into a
stub passes its check, a wrong one gets its diagnosis code; nbgrader's Validate gives a verdict.
Screenshots of every step go to test-artifacts/browser/<section>/.
"""
from __future__ import annotations

import re
import shutil
import time

import pytest

from utils.checks.core import FAIL_MARK, PASS_MARK

from .bugbank import all_variants
from .browser_lab import CHROMIUM, CHROMIUM_ARGS, Lab, copy_course
from .browser_learner import Learner
from .conftest import ROOT, load_notebook

# section -> the exercise typed in by the learner (right and wrong versions come from the bug bank).
# Two sections, a function and one using torch ops on heads: each costs a minute of the suite's 12, and
# tests/test_hub.py drives the Assignments tab and the formgrader in the same browser.
SECTIONS = {
    "02_scaling_and_softmax": "softmax",
    "09_rope": "apply_rope",
}
ARTIFACTS = ROOT / "test-artifacts" / "browser"
CHINESE = re.compile(r"[\u4e00-\u9fff]")
VISIBLE_CHECK = re.compile(r"^check_(\w+)\(\1\)\s*$")

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("browser"), pytest.mark.needs("chromium")]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    scratch = tmp_path_factory.mktemp("lab")
    server = Lab(copy_course(scratch / "course"), scratch / "server")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def learner(lab, browser, request):
    section = request.node.callspec.params["section"]
    shutil.rmtree(ARTIFACTS / section, ignore_errors=True)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    yield Learner(context.new_page(), ARTIFACTS / section)
    context.close()
    lab.shut_down_kernels()


def variants(exercise: str):
    """From the bug bank: a right implementation of ``exercise`` and a wrong one its check diagnoses."""
    bank = [v for v in all_variants() if v.exercise == exercise]
    right = next(v for v in bank if v.expected is None)
    wrong = next(v for v in bank if v.expected not in (None, "crashed") and not v.fits_visible)
    return right, wrong


@pytest.mark.parametrize("section", SECTIONS)
def test_a_learner_works_through_the_section_in_jupyterlab(section, lab, learner):
    start = time.monotonic()
    learner.open(lab.url(f"notebooks/{section}/{section}.ipynb"))
    learner.shot("opened")
    restarts = learner.run_everything()
    learner.shot("ran-every-cell")
    print(f"{section}: every cell ran ({restarts} restarts after failing checks) "
          f"after {time.monotonic() - start:.0f} s")
    assert_page_reads_right(learner)
    assert_slider_redraws_in_place(learner)
    assert_typed_exercise_is_checked(learner, SECTIONS[section])
    print(f"{section}: slider and exercise done after {time.monotonic() - start:.0f} s")
    assert_validate_gives_a_verdict(learner, SECTIONS[section])
    print(f"{section}: {time.monotonic() - start:.0f} s, screenshots in {learner.artifacts}")


# "**运行 → 运行所有单元格**": a menu path as the README and section 00 tell the learner to follow it
MENU_PATH = re.compile(r"\*\*((?:[^*\n，。]{1,40} → )+[^*\n，。]{1,40})\*\*")


def documented_menu_paths() -> list[list[str]]:
    texts = [(ROOT / "README.md").read_text(encoding="utf-8")]
    texts += [cell["source"] for cell in load_notebook("solutions", "00_start_here")["cells"]
              if cell["cell_type"] == "markdown"]
    return [path.split(" → ") for text in texts for path in MENU_PATH.findall(text)]


def test_the_menus_the_course_names_are_the_ones_the_learner_sees(lab, browser):
    """JupyterLab in Simplified Chinese: every menu path the README and section 00 name is there, word for
    word (the language pack composes some labels, so only the real menus can tell)."""
    paths = documented_menu_paths()
    assert ["运行", "运行所有单元格"] in paths and ["设置", "语言", "English - English"] in paths
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        learner = Learner(context.new_page(), ARTIFACTS / "menus")
        learner.open(lab.url("notebooks/00_start_here/00_start_here.ipynb"))
        missing = [" → ".join(path) for path in paths if path[-1] not in learner.menu_labels(path[:-1])]
    finally:
        context.close()
        lab.shut_down_kernels()
    assert not missing, f"named in the README or section 00, not in JupyterLab's menus: {missing}"


def assert_page_reads_right(learner: Learner) -> None:
    # JupyterLab in Simplified Chinese marks the page zh-CN: what makes Chromium pick the Simplified
    # Chinese glyphs of a CJK font (it takes Noto Sans CJK's Japanese ones for a page that says en)
    assert learner.page.evaluate("document.documentElement.lang") == "zh-CN", "the page does not say zh-CN"
    assert learner.typeset_formulas() > 0, "MathJax typeset nothing"
    assert learner.raw_tex() == [], "raw TeX left in the Markdown"

    figures = learner.figures()
    assert figures, "no figure drawn"
    for figure in figures:
        assert figure["complete"] and min(figure["natural"]) >= 100 and min(figure["drawn"]) >= 50, figure

    paragraph = learner.page.locator(".jp-RenderedMarkdown p").filter(has_text=CHINESE).first
    assert_simplified_chinese_font(learner.fonts_drawing(paragraph))

    checks = [source for source in learner.sources() if VISIBLE_CHECK.match(source.strip())]
    errors = learner.error_cells()
    assert [source.strip() for source, _ in errors] == [c.strip() for c in checks], \
        "only the stubs' check cells may fail"
    for source, output in errors:
        assert "尚未实现" in output and FAIL_MARK in output, (source, output)
    learner.shot("stub-check-message", learner.cell_with_source(VISIBLE_CHECK.pattern))


def assert_simplified_chinese_font(fonts: dict[str, int]) -> None:
    cjk = {family: glyphs for family, glyphs in fonts.items() if "CJK" in family}
    assert cjk, f"no CJK font drew the Chinese text: {fonts}"
    assert all(family.endswith("SC") for family in cjk), f"not the Simplified Chinese glyphs: {fonts}"


def assert_slider_redraws_in_place(learner: Learner) -> None:
    cell = learner.cell_with_source(r"\bexplore\(")
    before = learner.image_sources(cell)
    assert len(before) == 1, "the static figure, once"
    learner.shot("slider-before", cell)
    learner.nudge_slider(cell)
    learner.wait_idle()
    deadline = time.monotonic() + 30
    while learner.image_sources(cell) == before and time.monotonic() < deadline:
        time.sleep(0.2)
    after = learner.image_sources(cell)
    learner.shot("slider-moved", cell)
    assert len(after) == 1, f"{len(after)} figures after moving the slider: redrawn below instead of in place"
    assert after != before, "the figure was not redrawn"
    figure_top = cell.locator(".jp-OutputArea-output img").bounding_box()["y"]
    slider_top = cell.locator(".noUi-handle").first.bounding_box()["y"]
    assert figure_top < slider_top, "the figure moved below its controls"


def assert_typed_exercise_is_checked(learner: Learner, exercise: str) -> None:
    right, wrong = variants(exercise)
    index = learner.index_of(rf"^(def|class) {exercise}\b")
    solution, check = learner.code_cells().nth(index), learner.code_cells().nth(index + 1)

    learner.replace_source(solution, right.source)
    learner.run_cell_and_next(index)
    learner.shot("right-implementation", check)
    assert f"{PASS_MARK} {exercise} 通过全部检查" in learner.output_text(check)
    assert_simplified_chinese_font(learner.fonts_drawing(check.locator(".jp-OutputArea-output").first))

    learner.replace_source(solution, wrong.source)
    learner.run_cell_and_next(index)
    learner.shot("wrong-implementation", check)
    assert f"{FAIL_MARK} [{wrong.expected}]" in learner.output_text(check)


def assert_validate_gives_a_verdict(learner: Learner, exercise: str) -> None:
    _, wrong = variants(exercise)
    verdict = learner.validate()
    learner.shot("validated")
    assert "failed" in verdict.lower() and f"[{wrong.expected}]" in verdict, verdict
