"""What a learner does in JupyterLab, as Playwright steps on one notebook page, and what the
page then shows (read from the DOM, or from Chromium's own account of the fonts it drew with).
"""
from __future__ import annotations

import re
import time
from pathlib import Path

STDERR = '[data-mime-type="application/vnd.jupyter.stderr"]'
# Raw TeX that MathJax would have replaced: $…$, $$…$$, \frac, \sqrt, …
RAW_TEX = re.compile(r"\$[^$\s][^$]*\$|\\(?:frac|sqrt|mathbb|mathrm|text|operatorname|sum|top|begin)\b")
# The learner's JupyterLab is in Simplified Chinese (course.py's LAB_DEFAULTS, the language pack): the menus
# as the learner reads them, and as the README and section 00 name them (tests/test_quickstart.py).
RUN_MENU, RUN_ALL, RUN_BELOW = "运行", "运行所有单元格", "运行选中的单元格及以下所有"
IDLE = "空闲"   # the status bar's "Python 3 (ipykernel) | 空闲"


class Learner:
    def __init__(self, page, artifacts: Path):
        self.page = page
        self.artifacts = artifacts
        self.shots = 0
        artifacts.mkdir(parents=True, exist_ok=True)

    # --- looking ---------------------------------------------------------------------

    def shot(self, step: str, element=None) -> None:
        """A screenshot of the page, scrolled to ``element`` when given, kept as a test artifact."""
        if element is not None:
            element.scroll_into_view_if_needed()
        self.shots += 1
        self.page.screenshot(path=str(self.artifacts / f"{self.shots:02d}-{step}.png"))

    def code_cells(self):
        return self.page.locator(".jp-CodeCell")

    def prompts(self) -> list[str]:
        return self.page.locator(".jp-CodeCell .jp-InputArea-prompt").all_inner_texts()

    def index_of(self, pattern: str) -> int:
        """The index of the first code cell whose source matches the regular expression ``pattern``."""
        found = next((i for i, text in enumerate(self.sources()) if re.search(pattern, text, re.M)), None)
        assert found is not None, f"no code cell matches {pattern!r}"
        return found

    def cell_with_source(self, pattern: str):
        return self.code_cells().nth(self.index_of(pattern))

    def sources(self) -> list[str]:
        return self.page.locator(".jp-CodeCell .cm-content").all_inner_texts()

    def output_text(self, cell) -> str:
        return "\n".join(cell.locator(".jp-OutputArea-output").all_inner_texts())

    def error_cells(self) -> list[tuple[str, str]]:
        """(source, output) of every code cell with an error or stderr output."""
        found = []
        for i in range(self.code_cells().count()):
            cell = self.code_cells().nth(i)
            if cell.locator(f".jp-OutputArea-output{STDERR}").count():
                found.append((cell.locator(".cm-content").inner_text(), self.output_text(cell)))
        return found

    def raw_tex(self) -> list[str]:
        """TeX left unrendered in the Markdown cells (code spans and blocks excluded)."""
        texts = self.page.evaluate("""() => [...document.querySelectorAll('.jp-RenderedMarkdown')].map(md => {
            const copy = md.cloneNode(true);
            copy.querySelectorAll('mjx-container, code, pre, script').forEach(e => e.remove());
            return copy.textContent; })""")
        return [m.group(0) for text in texts for m in RAW_TEX.finditer(text)]

    def typeset_formulas(self) -> int:
        return self.page.locator(".jp-RenderedMarkdown mjx-container").count()

    def figures(self) -> list[dict]:
        """Every image in the outputs: whether it loaded, its natural and its drawn size."""
        return self.page.evaluate("""() => [...document.querySelectorAll('.jp-OutputArea-output img')].map(img => {
            const box = img.getBoundingClientRect();
            return {complete: img.complete, natural: [img.naturalWidth, img.naturalHeight],
                    drawn: [box.width, box.height]}; })""")

    def fonts_drawing(self, element) -> dict[str, int]:
        """The fonts Chromium drew ``element``'s text with: family -> glyph count."""
        element.evaluate("e => e.setAttribute('data-font-probe', '')")
        try:
            cdp = self.page.context.new_cdp_session(self.page)
            cdp.send("DOM.enable")
            cdp.send("CSS.enable")
            root = cdp.send("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
            node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": "[data-font-probe]"})["nodeId"]
            fonts = cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]
            cdp.detach()
        finally:
            element.evaluate("e => e.removeAttribute('data-font-probe')")
        counts: dict[str, int] = {}
        for font in fonts:
            counts[font["familyName"]] = counts.get(font["familyName"], 0) + font["glyphCount"]
        return counts

    # --- doing -----------------------------------------------------------------------

    def open(self, url: str) -> None:
        """Open the notebook and wait until its kernel is connected and idle."""
        self.page.goto(url)
        self.page.locator(".jp-Notebook .jp-CodeCell").first.wait_for(timeout=60_000)
        self.wait_idle(timeout=90)

    def kernel_idle(self) -> bool:
        """Both the status bar ("Python 3 (ipykernel) | 空闲") and the toolbar's indicator say idle:
        the toolbar alone reads idle about a second before the kernel is connected."""
        status = " ".join(self.page.locator(".jp-StatusBar-TextItem").all_inner_texts())
        indicator = self.page.locator(".jp-Notebook-ExecutionIndicator").first
        busy = indicator.count() and indicator.get_attribute("data-status") not in (None, "idle")
        return re.search(rf"\| {IDLE}", status) is not None and not busy

    def wait_idle(self, timeout: float = 120) -> None:
        """Wait until the kernel is idle and no cell is queued or running, steadily (1 s)."""
        deadline = time.monotonic() + timeout
        steady_since = None
        while True:
            if self.kernel_idle() and "[*]:" not in self.prompts():
                steady_since = steady_since or time.monotonic()
                if time.monotonic() - steady_since >= 1.0:
                    return
            else:
                steady_since = None
            if time.monotonic() > deadline:
                raise TimeoutError("the kernel did not become idle")
            time.sleep(0.2)

    def menu(self, menu: str, item: str) -> None:
        self.page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{menu}$")).click()
        self.page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")).click()

    def menu_labels(self, path: list[str]) -> list[str]:
        """The labels of the menu reached through ``path`` (a main-menu title, then submenus), as shown."""
        self.page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{re.escape(path[0])}$")).click()
        for submenu in path[1:]:
            self.page.locator(".lm-Menu:visible .lm-Menu-itemLabel",
                              has_text=re.compile(f"^{re.escape(submenu)}$")).last.hover()
            self.page.wait_for_timeout(500)
        labels = self.page.locator(".lm-Menu:visible").last.locator(".lm-Menu-itemLabel").all_inner_texts()
        for _ in path:
            self.page.keyboard.press("Escape")
        return labels

    def run_everything(self) -> int:
        """Run All; where it stops at a failing check, carry on from the first cell that did not run.
        Returns how many times it had to carry on."""
        self.menu(RUN_MENU, RUN_ALL)
        self.wait_ran(0)
        restarts = 0
        while (first := self.first_not_run()) is not None:
            restarts += 1
            assert restarts <= 20, "Run All keeps stopping"
            self.code_cells().nth(first).locator(".jp-InputArea-prompt").click()
            self.menu(RUN_MENU, RUN_BELOW)
            self.wait_ran(first)
        return restarts

    def first_not_run(self) -> int | None:
        return next((i for i, prompt in enumerate(self.prompts()) if prompt.strip() in ("[ ]:", "")), None)

    def wait_ran(self, index: int, before: str = "[ ]:", timeout: float = 60) -> None:
        """Wait until code cell ``index`` has run (its prompt shows a new number), then until idle."""
        prompt = self.code_cells().nth(index).locator(".jp-InputArea-prompt")
        deadline = time.monotonic() + timeout
        while prompt.inner_text().strip() in (before, "[*]:", ""):
            if time.monotonic() > deadline:
                raise TimeoutError(f"code cell {index} did not run")
            time.sleep(0.2)
        self.wait_idle()

    def replace_source(self, cell, source: str) -> None:
        """Click into the cell's editor, select everything and put ``source`` there."""
        editor = cell.locator(".cm-content")
        editor.click()
        self.page.keyboard.press("ControlOrMeta+a")
        self.page.keyboard.insert_text(source)
        self.page.keyboard.press("Escape")

    def run_cell_and_next(self, index: int) -> None:
        """Shift+Enter twice from code cell ``index``: it and the cell after it (its check)."""
        before = self.prompts()[index + 1].strip()
        self.code_cells().nth(index).locator(".jp-InputArea-prompt").click()
        self.page.keyboard.press("Shift+Enter")
        self.page.keyboard.press("Shift+Enter")
        self.wait_ran(index + 1, before)

    def nudge_slider(self, cell) -> None:
        """Focus the first slider of ``cell``'s controls and press → once."""
        handle = cell.locator(".noUi-handle").first
        handle.focus()
        self.page.keyboard.press("ArrowRight")

    def image_sources(self, cell) -> list[str]:
        return cell.locator(".jp-OutputArea-output img").evaluate_all("imgs => imgs.map(i => i.src)")

    def validate(self) -> str:
        """Press nbgrader's Validate in the toolbar; return the verdict dialog's text."""
        self.page.locator(".validate-button").first.click()
        dialog = self.page.locator(".jp-Dialog").filter(has_text="Validation Results")
        dialog.wait_for(timeout=180_000)
        return dialog.inner_text()
