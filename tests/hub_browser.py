"""Chromium (Playwright, the system browser) on the class's JupyterHub: a student's Assignments tab,
the instructor's formgrader. Every step leaves a screenshot in ``shots``."""
from __future__ import annotations

from pathlib import Path

from .browser_lab import CHROMIUM, CHROMIUM_ARGS
from .hub_class import PASSWORD, Hub

TIMEOUT_MS = 120_000   # a loaded 2-core machine: a server's first JupyterLab page takes a while


class HubBrowser:
    def __init__(self, hub: Hub, shots: Path):
        from playwright.sync_api import sync_playwright
        self.hub, self.shots = hub, shots
        self._playwright = sync_playwright().start()
        self._browser = self._playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)

    def close(self) -> None:
        self._browser.close()
        self._playwright.stop()

    def shot(self, page, name: str) -> None:
        page.screenshot(path=str(self.shots / f"{name}.png"))

    def log_in(self, name: str, then: str):
        """The Hub's login form, then ``then`` (a path on the Hub)."""
        page = self._browser.new_context(viewport={"width": 1280, "height": 860}, locale="zh-CN",
                                          ignore_https_errors=True).new_page()   # the test's own certificate
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(self.hub.url(f"/hub/login?next={then}"))
        page.fill("#username_input", name)
        page.fill("#password_input", PASSWORD)
        page.click("#login_submit")
        page.wait_for_url(f"**{then}**")
        return page


class AssignmentsTab:
    """nbgrader's Assignments panel in a student's JupyterLab (ids as in nbgrader's own UI tests)."""

    def __init__(self, browser: HubBrowser, student: str):
        from playwright.sync_api import expect
        self.expect, self.browser = expect, browser
        self.page = browser.log_in(student, f"/user/{student}/lab")
        self.page.locator('#jp-menu-panel div.lm-MenuBar-itemLabel:text("Nbgrader")').click()
        items = self.page.locator("#jp-mainmenu-nbgrader li[data-command]")
        self.expect(items.first).to_be_visible()
        # what the student's Nbgrader menu shows (an item whose plugin is disabled is there, hidden)
        self.menu = items.evaluate_all("items => items.filter(item => !item.classList.contains('lm-mod-hidden'))"
                                       ".map(item => item.dataset.command)")
        self.page.locator('#jp-mainmenu-nbgrader li[data-command="nbgrader:open-assignment-list"]').click()

    def rows(self, status: str, count: int):
        rows = self.page.locator(f"#{status}_assignments_list > .list_item")
        self.expect(rows).to_have_count(count)
        return rows

    def fetch(self) -> None:
        self.rows("released", 1).first.locator(".item_status button").click()
        self.rows("fetched", 1)
        self.browser.shot(self.page, "student-1-fetched")

    def submit(self) -> None:
        self.page.locator("#refresh_assignments_list").click()
        self.rows("fetched", 1).first.locator('.item_status button:text("Submit")').click()
        self.rows("submitted", 1)
        self.browser.shot(self.page, "student-2-submitted")

    def fetch_feedback(self) -> None:
        self.page.locator("#refresh_assignments_list").click()
        with self.page.expect_response(lambda response: "/assignments/fetch_feedback" in response.url):
            self.rows("submitted", 1).first.locator('.item_status button:text("Fetch Feedback")').click()

    def show(self, path: str, text: str) -> None:
        """Open a file of the student's server (the feedback page) and see ``text`` on it."""
        student = self.page.url.split("/user/")[1].split("/")[0]
        self.page.goto(self.browser.hub.url(f"/user/{student}/files/{path}"))
        shown = self.page.get_by_text(text).first
        self.expect(shown).to_be_visible()
        shown.scroll_into_view_if_needed()
        self.browser.shot(self.page, "student-3-feedback")


def grade_in_formgrader(browser: HubBrowser, submission_id: str, cell: str, score: float, comment: str) -> None:
    """The instructor opens one submission in the formgrader (through the Hub) and grades a cell."""
    page = browser.log_in("teacher", f"/services/attention/formgrader/submissions/{submission_id}/")
    # the page binds its inputs once it has fetched the grades and comments (formgrade.js)
    page.wait_for_function("formgrader.grades && formgrader.grades.loaded && formgrader.comments.loaded")
    score_box, comment_box = page.locator(f"#{cell}"), page.locator(f"#{cell}-comment")
    score_box.fill(str(score))
    score_box.dispatch_event("change")     # the formgrader saves on change
    comment_box.fill(comment)
    comment_box.dispatch_event("change")
    score_box.scroll_into_view_if_needed()
    browser.shot(page, "instructor-formgrader")
