"""Chinese text in figures renders with a real CJK font on a fresh machine (no tofu boxes)."""
from __future__ import annotations

import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from utils.plotting import heatmap, setup_chinese_font  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
LABELS = ["小明", "把", "钥匙", "放进", "口袋"]


def draw_chinese_figure() -> plt.Figure:
    fig, ax = plt.subplots(figsize=(4, 3.5))
    weights = torch.softmax(torch.randn(5, 5).masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), -torch.inf), -1)
    heatmap(ax, weights, "因果注意力权重（下三角）", labels=LABELS)
    fig.tight_layout()
    return fig


def draw_and_collect_missing_glyphs() -> tuple[plt.Figure, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig = draw_chinese_figure()
        fig.canvas.draw()
    return fig, [str(w.message) for w in caught if "missing from font" in str(w.message)]


def test_bundled_cjk_font_draws_every_glyph():
    assert setup_chinese_font() == "Noto Sans CJK SC"
    fig, missing = draw_and_collect_missing_glyphs()
    assert missing == []
    ARTIFACTS.mkdir(exist_ok=True)
    out = ARTIFACTS / "chinese_font.png"
    fig.savefig(out, dpi=100)
    plt.close(fig)
    print(f"figure with Chinese text saved to {out}")
    assert out.stat().st_size > 5_000


def test_without_the_cjk_font_the_same_figure_would_show_boxes():
    """The negative control: proves the glyph check above can fail."""
    with matplotlib.rc_context({"font.family": "sans-serif", "font.sans-serif": ["DejaVu Sans"]}):
        fig, missing = draw_and_collect_missing_glyphs()
        assert missing, "DejaVu Sans has no CJK glyphs: warnings expected"
        plt.close(fig)


@pytest.mark.parametrize("family", ["Noto Sans CJK SC"])
def test_font_is_registered_with_matplotlib(family):
    setup_chinese_font()
    assert family in {f.name for f in matplotlib.font_manager.fontManager.ttflist}


SLIDER_NOTEBOOK = [
    "import ipywidgets as widgets, matplotlib.pyplot as plt\n"
    "from utils.widgets import explore\n"
    "def draw(n):\n"
    "    print(f'n = {n}')\n"
    "    fig, ax = plt.subplots(figsize=(2, 2))\n"
    "    ax.bar(range(n), range(n))\n"
    "    return fig\n"
    "slider = widgets.IntSlider(value=2, min=1, max=5)\n"
    "box = explore(draw, n=slider)",
    "slider.value = 5",
]


def run_cells(sources: list[str]):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    NotebookClient(nb, timeout=60, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    return nb


def outputs_with(cell, mime: str) -> list[dict]:
    return [o for o in cell.outputs if mime in o.get("data", {})]


@pytest.mark.slow
def test_moving_a_control_redraws_the_figure_in_place():
    """The kernel's display updates, as JupyterLab applies them (nbclient does the same):
    one text and one figure above the controls, replaced — not a second figure below them."""
    nb = run_cells(SLIDER_NOTEBOOK)
    explore_cell, move_cell = nb.cells
    images = outputs_with(explore_cell, "image/png")
    texts = [o["data"]["text/plain"] for o in explore_cell.outputs
             if set(o.get("data", {})) == {"text/plain"}]
    assert len(images) == 1, "one figure"
    assert texts == ["n = 5"], "the printed text is redrawn too"
    assert move_cell.outputs == [], "nothing is drawn below the controls"
    fresh = run_cells(SLIDER_NOTEBOOK[:1]).cells[0]
    assert outputs_with(fresh, "image/png")[0]["data"] != images[0]["data"], "the figure was redrawn"
