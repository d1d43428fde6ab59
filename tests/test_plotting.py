"""Chinese text in figures renders with a real CJK font on a fresh machine (no tofu boxes); figures read
without colour (a colour-blind-safe palette, series told apart by marker, dash or hatch); every demo figure
comes with a text alternative."""
from __future__ import annotations

import ast
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.container import BarContainer  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from utils import plotting  # noqa: E402
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


# --- readable without colour ------------------------------------------------------------------

# Machado, Oliveira & Fernandes (2009): how a person with each dichromacy sees linear sRGB (severity 1).
DICHROMACIES = {
    "protanopia": [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]],
    "deuteranopia": [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]],
    "tritanopia": [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602], [0.004733, 0.691367, 0.303900]],
}
APART = 12.0   # CIELAB ΔE*76 between two colours seen with a dichromacy: clearly two colours


def lab(color, seen_with=np.eye(3)) -> np.ndarray:
    """CIELAB (D65) of a matplotlib colour as seen through a 3×3 matrix on linear sRGB."""
    rgb = np.array(matplotlib.colors.to_rgb(color))
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    linear = np.clip(np.asarray(seen_with) @ linear, 0, 1)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ linear
    t = xyz / np.array([0.95047, 1.0, 1.08883])
    f = np.where(t > (6 / 29) ** 3, np.cbrt(t), t / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def closest_pair(colors, seen_with) -> tuple[float, str, str]:
    return min((float(np.linalg.norm(lab(a, seen_with) - lab(b, seen_with))), a, b)
               for i, a in enumerate(colors) for b in colors[i + 1:])


@pytest.mark.parametrize("deficiency", DICHROMACIES)
def test_the_palette_stays_apart_with_each_colour_vision_deficiency(deficiency):
    distance, a, b = closest_pair(plotting.PALETTE, DICHROMACIES[deficiency])
    assert distance >= APART, f"{a} and {b} look alike with {deficiency} (ΔE {distance:.1f})"


def test_the_red_and_green_the_figures_had_look_alike_with_deuteranopia():
    """The negative control: the check above tells the figures' former red and green apart from a safe pair."""
    assert closest_pair(["#C44E52", "#55A868"], DICHROMACIES["deuteranopia"])[0] < APART


def test_series_styles_differ_without_colour():
    lines = [plotting.line_style(i) for i in range(len(plotting.DASHES))]
    assert len({(s["marker"], str(s["linestyle"])) for s in lines}) == len(lines)
    assert len({str(plotting.line_style(i, marker=False)["linestyle"]) for i in range(len(plotting.DASHES))}) \
        == len(plotting.DASHES), "dense curves (no markers) differ in dash alone"
    assert len({plotting.bar_style(i)["hatch"] for i in range(len(plotting.HATCHES))}) == len(plotting.HATCHES)
    assert all(plotting.text_color_on(c) == "white" for c in (plotting.BLUE, plotting.BLACK))
    assert plotting.text_color_on(plotting.YELLOW) == "black"


def look(handle) -> tuple:
    """What tells a legend entry apart when its colour cannot: marker, dash, hatch, transparency."""
    if isinstance(handle, BarContainer):
        handle = handle.patches[0]
    if isinstance(handle, Line2D):
        return ("line", handle.get_marker(), str(handle._unscaled_dash_pattern), handle.get_alpha())
    return ("patch", handle.get_hatch(), handle.get_alpha())


TS = [16, 32, 64, 128]
Z = torch.linspace(-4, 4, 50)
STACKINGS = {"Pre-Norm（有残差）": [1.0, 0.5, 0.2], "Post-Norm（有残差）": [2.0, 1.0, 0.1],
             "无残差（有归一化）": [3.0, 0.3, 0.01]}
RUNS = ("A：因果", "B：无掩码", "C：错位")


def demo_figures():
    """name -> a call drawing one of the course's figures of several series, on made-up data."""
    from utils.demos import overview, s02, s03, s04, s05, s06, s07, s08, s09, s11

    w = torch.softmax(torch.randn(4, 4, generator=torch.Generator().manual_seed(0)), -1)
    stats = dict.fromkeys(("max_weight", "entropy", "jac_mean", "jac_median", "grad_mean", "grad_median"),
                          [1.0, 0.5, 0.1])
    times = {"循环版": [4e-3, 8e-3, 2e-2, 5e-2], "向量化版": [1e-3, 2e-3, 4e-3, 9e-3], "SDPA": [5e-4, 1e-3, 2e-3, 4e-3]}
    methods = {"朴素注意力": [1, 4, 16, 64], "分块注意力": [1, 2, 4, 8], "SDPA": [1, 3, 9, 27]}
    caches = {1: {f"{s07.kind(32, n)}：{n} 组 K/V": [n * 2 ** 20 * c for c in (1, 2, 4)] for n in (32, 8, 1)}}
    curves = {"title": "t", "x": Z, "xlabel": "Δ", "ylabel": "分数", "curves": {"a": Z.sin(), "b": Z.cos(), "c": Z},
              "styles": {"c": {"ls": "-"}}}
    parts = {"小模型": dict(zip(s11.PARTS, (10, 40, 80, 1, 10))),
             "大模型": dict(zip(s11.PARTS, (100, 400, 800, 1, 90)))}
    memory = {"B=1": [4 * t * t for t in TS], "B=8": [32 * t * t for t in TS]}
    return {
        "overview": overview.draw,
        "s02 std": lambda: s02.plot_std_vs_dim([2, 4, 8], [1.4, 2.0, 2.8], [1.0, 1.0, 1.0], [0.7, 0.5, 0.35]),
        "s02 collapse": lambda: s02.plot_gradient_collapse([0.1, 1.0, 10.0], stats, 16, {"c=1": 1.0}),
        "s03 saturated": lambda: s03.plot_healthy_vs_saturated(w, (w * 8).softmax(-1), ["健康", "饱和"]),
        "s04 leak": lambda: s04.plot_leak_experiment(
            dict(zip(RUNS, ([3.0, 2.0, 1.2], [3.0, 1.0, 0.2], [3.0, 2.5, 2.0]))), 1.0,
            {run: {"训练式": 0.5, "只给前缀": 0.4} for run in RUNS}, 0.1, 0.6),
        "s04 sums": lambda: s04.plot_running_sums({f"{dtype} 累加": torch.arange(1.0, 5.0) * i
                                                   for i, dtype in enumerate(("float32", "float16", "bfloat16"), 1)}),
        "s05 timings": lambda: s05.plot_timings(TS, times, "时间"),
        "s05 memory": lambda: s05.plot_weight_memory(TS, memory),
        "s06 share": lambda: s06.plot_attention_share(TS, {"A": [0.1, 0.2, 0.4, 0.6], "B": [0.05, 0.1, 0.2, 0.3]},
                                                      {"A": 90.0, "B": 300.0}),
        "s06 loglog": lambda: s06.plot_loglog(TS, methods, dict.fromkeys(methods, 1.5), "MiB", "峰值内存").figure,
        "s07 decode": lambda: s07.plot_decode_times(TS, [0.1, 0.2, 0.4, 0.8], [0.2, 0.8, 3.2, 12.8], "生成"),
        "s07 cache": lambda: s07.plot_cache_sizes([1024, 2048, 4096], caches, "KV Cache"),
        "s08 activations": lambda: s08.plot_activations(Z, {"ReLU": Z.relu(), "GELU": torch.nn.functional.gelu(Z),
                                                            "SiLU": torch.nn.functional.silu(Z)}),
        "s08 ffn": lambda: s08.plot_ffn_share(TS, {"a": [0.6, 0.5, 0.4, 0.3], "b": [0.7, 0.6, 0.5, 0.4]},
                                              {"a": 0.6, "b": 0.7}),
        "s08 eps": lambda: s08.plot_eps_effect(Z.exp(), {"里面": Z.exp(), "外面": Z.exp() / 2}, 1e-6),
        "s08 norms": lambda: s08.plot_grad_norms(STACKINGS, "梯度"),
        "s08 training": lambda: s08.plot_training(STACKINGS, "训练"),
        "s08 spread": lambda: s08.plot_spread([2, 4, 8], STACKINGS, "比值"),
        "s09 curves": lambda: s09.plot_curves([curves]),
        "s11 accuracy": lambda: s11.plot_accuracy_by_length(TS, {"a": [1.0, 0.9, 0.5, 0.1], "b": [1.0, 1.0, 0.9, 0.8],
                                                                 "c": [1.0, 0.5, 0.1, 0.0]}, 32, "准确率"),
        "s11 training": lambda: s11.plot_training({"训练": (range(1, 5), [3.0, 2.0, 1.5, 1.2]),
                                                   "验证": (range(1, 5), [3.1, 2.2, 1.8, 1.7])}, {"均匀": 4.0}, "损失"),
        "s11 parts": lambda: s11.plot_parameter_breakdown(parts, "参数"),
    }


@pytest.mark.parametrize("name", list(demo_figures()))
def test_a_figure_of_several_series_tells_them_apart_without_colour(name):
    setup_chinese_font()
    fig = demo_figures()[name]()
    legends = [ax for ax in fig.axes if ax.get_legend_handles_labels()[0]]
    assert legends, "no series with a legend"
    for ax in legends:
        handles, labels = ax.get_legend_handles_labels()
        looks = [look(h) for h in handles]
        alike = [label for label, seen in zip(labels, looks) if looks.count(seen) > 1]
        assert not alike, f"{name}: {alike} differ in colour only"
    plt.close(fig)


# --- text alternatives ------------------------------------------------------------------------

def builds_a_figure(function: ast.FunctionDef) -> bool:
    calls = {ast.unparse(node.func) for node in ast.walk(function) if isinstance(node, ast.Call)}
    return bool(calls & {"plt.subplots", "plt.figure", "heatmaps"})


def demo_functions():
    """Every function of utils/demos/ (methods too) and utils/plotting.py's own demo figures."""
    for path in sorted((ROOT / "utils" / "demos").glob("*.py")):
        yield from (node for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                    if isinstance(node, ast.FunctionDef))
    yield from (node for node in ast.parse((ROOT / "utils" / "plotting.py").read_text(encoding="utf-8")).body
                if isinstance(node, ast.FunctionDef) and "demo_figure" in map(ast.unparse, node.decorator_list))


def test_every_function_that_builds_a_demo_figure_gives_it_a_text_alternative():
    drawing = [node for node in demo_functions() if builds_a_figure(node)]
    silent = [node.name for node in drawing if not any(
        isinstance(call, ast.Call) and ast.unparse(call.func) == "describe" for call in ast.walk(node))]
    assert len(drawing) > 50
    assert not silent, f"these draw a figure without describe(fig, …) (utils/plotting.py): {silent}"


def test_the_text_alternative_is_printed_with_the_figure_and_says_its_numbers(capsys):
    from utils.demos import s07

    for slow, fast in ([2.0, 8.0], [1.0, 4.0]), ([3.0, 30.0], [1.0, 2.0]):
        plt.close(s07.plot_decode_times([8, 16], fast, slow, "生成"))
        printed = capsys.readouterr().out.splitlines()
        assert len(printed) == 1 and printed[0].startswith(plotting.TEXT_ALTERNATIVE), printed
        assert f"{1e3 * slow[-1]:.1f} ms" in printed[0] and f"{slow[-1] / fast[-1]:.1f}×" in printed[0], printed


def test_a_figure_drawn_with_another_demo_figure_prints_its_own_text_only(capsys):
    from utils.demos import s04

    plt.close(s04.plot_mask_grid([torch.ones(3, 3).tril()], ["因果"]))   # draws with plotting.heatmaps
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 1 and "6 格可以看" in printed[0], printed


def test_a_demo_figure_without_a_text_alternative_is_refused():
    @plotting.demo_figure
    def undescribed():
        fig, _ = plt.subplots()
        return fig

    with pytest.raises(RuntimeError, match="without a text alternative"):
        undescribed()
    plt.close("all")


def test_at_grading_no_demo_figure_is_drawn_or_described(monkeypatch, capsys):
    from utils import GRADING_BACKEND
    from utils.demos import s07

    monkeypatch.setitem(matplotlib.rcParams, "backend", GRADING_BACKEND)
    assert not s07.plot_decode_times([8, 16], [1.0, 2.0], [2.0, 8.0], "生成").axes
    assert capsys.readouterr().out == ""
