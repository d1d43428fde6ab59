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

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
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
