"""The environment check of section 00: a standard-library preflight, then versions, device, CJK font.

``preflight()`` imports nothing heavy (only ``importlib``), so a learner whose set-up is
broken (a missing package, a torch that is too old, no Chinese font) reads what is wrong,
in Chinese, before the first ``import torch`` fails with an ImportError. Everything else
imports torch lazily, inside the function that needs it.
"""
from __future__ import annotations

import importlib.metadata as metadata
import importlib.util
import platform
import re
import sys
import unicodedata
from collections.abc import Callable, Iterable
from pathlib import Path

PACKAGES = ("torch", "numpy", "matplotlib", "ipywidgets", "jupyterlab", "nbgrader")
# (module, distribution, what it is for): what the notebooks cannot run without
REQUIRED = (("torch", "torch", "张量与注意力的全部计算"), ("numpy", "numpy", "PyTorch 与画图都用它"),
            ("matplotlib", "matplotlib", "画图"), ("ipywidgets", "ipywidgets", "滑块等交互控件"))
MIN_PYTHON = (3, 11)   # course.py SUPPORTED_PYTHON[0], pyproject requires-python (tests/test_setup.py)
# The newest PyTorch API the course calls sets the minimum (pyproject.toml's torch range starts here too;
# tests/test_env_preflight.py finds the APIs in the repo and keeps the two in step).
MIN_TORCH = (2, 5)
MIN_TORCH_WHY = "07 节用的 F.scaled_dot_product_attention(..., enable_gqa=True) 从 PyTorch 2.5 起才有"
FIX = "在仓库根目录运行 `python3 course.py setup`，然后重启内核（内核 → 重启内核…）再从头运行。"
# Chinese fonts: the one mplfonts ships, then common system fonts (file names, lower case)
_CJK_FONT_FILES = re.compile(r"notosanscjk|notoserifcjk|sourcehansans|msyh|simhei|simsun|pingfang|stheiti|"
                             r"wqy|wenquanyi|notosanssc|droidsansfallback", re.IGNORECASE)
_FONT_DIRS = ("/usr/share/fonts", "/usr/local/share/fonts", "~/.fonts", "~/.local/share/fonts",
              "/System/Library/Fonts", "/Library/Fonts", "~/Library/Fonts", "C:/Windows/Fonts")


class EnvironmentProblem(RuntimeError):
    """The set-up cannot run the course. In Jupyter it shows as a short Chinese message."""

    def _render_traceback_(self) -> list[str]:
        return ["\x1b[31m✗ 环境有问题，先修好再继续：\x1b[0m", *str(self).splitlines()]


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text.split("+")[0])[:2])


def _cjk_font(find_spec: Callable, font_dirs: Iterable[str]) -> str | None:
    """The file of a Chinese font matplotlib can use, found without importing matplotlib."""
    spec = find_spec("mplfonts")
    if spec is not None and spec.submodule_search_locations:
        bundled = Path(next(iter(spec.submodule_search_locations))) / "fonts" / "NotoSansCJKsc-Regular.otf"
        if bundled.exists():
            return bundled.name
    for folder in font_dirs:
        root = Path(folder).expanduser()
        if root.is_dir():
            match = next((p for p in root.rglob("*") if _CJK_FONT_FILES.search(p.name)), None)
            if match is not None:
                return match.name
    return None


def preflight(find_spec: Callable = importlib.util.find_spec, version: Callable = metadata.version,
              python: tuple[int, ...] = tuple(sys.version_info[:2]),
              font_dirs: Iterable[str] = _FONT_DIRS) -> list[str]:
    """Check the set-up with the standard library only; print one Chinese line per finding.

    Raises :class:`EnvironmentProblem` (listing every problem and its fix) when the course
    cannot run; a missing Chinese font is only a warning. Returns the warnings. The
    arguments exist so that a test can simulate a broken machine.
    """
    problems, warnings = [], []
    if python < MIN_PYTHON:
        problems.append(f"Python 版本是 {'.'.join(map(str, python))}，本课程需要 ≥ {'.'.join(map(str, MIN_PYTHON))}。"
                        "请用 `python3 course.py setup` 建立的环境（.venv）启动 JupyterLab。")
    for module, dist, purpose in REQUIRED:
        if find_spec(module) is None:
            problems.append(f"缺少 {dist}（{purpose}）。{FIX}")
    if find_spec("torch") is not None:
        try:
            found = version("torch")
        except metadata.PackageNotFoundError:
            found = "0"
        if _version_tuple(found) < MIN_TORCH:
            problems.append(f"PyTorch 版本是 {found}，太旧了：本课程需要 ≥ {'.'.join(map(str, MIN_TORCH))}"
                            f"（{MIN_TORCH_WHY}）。{FIX}")
    font = _cjk_font(find_spec, font_dirs)
    if font is None:
        warnings.append("没有找到中文字体：图里的中文会显示成方框（□□□），练习和检查不受影响。"
                        "运行 `python3 course.py setup`（它安装自带中文字体的 mplfonts 包），或在系统里装一个中文字体"
                        "（Noto Sans CJK SC、思源黑体、微软雅黑、苹方），然后重启内核。")
    for line in warnings:
        print("!", line)
    if problems:
        raise EnvironmentProblem("\n".join(f"  {i}. {p}" for i, p in enumerate(problems, 1)))
    print(f"✓ Python {'.'.join(map(str, python))}，所需的库都在" + (f"，中文字体：{font}。" if font else "。")
          + "可以继续运行下一个单元格。")
    return warnings


def device():
    """CUDA if present, otherwise CPU (the whole course runs on CPU)."""
    import torch
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def report() -> dict[str, str]:
    """Versions and device, as a dict (printed by ``print_report``)."""
    import torch
    info = {"Python": sys.version.split()[0], "系统": f"{platform.system()} {platform.machine()}"}
    for name in PACKAGES:
        try:
            info[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            info[name] = "未安装"
    cpu_note = "" if torch.cuda.is_available() else "（没有 GPU 也没关系，本课程全部在 CPU 上运行）"
    info["设备"] = str(device()) + cpu_note
    info["CPU 线程数"] = str(torch.get_num_threads())
    return info


def print_report() -> dict[str, str]:
    from .plotting import setup_chinese_font
    info = report()
    info["中文字体"] = setup_chinese_font() or "未找到（图中的中文可能显示为方框）"
    width = max(display_width(k) for k in info)
    for key, value in info.items():
        print(key + " " * (width - display_width(key)), value, sep="  ")
    return info


def display_width(text: str) -> int:
    """Columns a string takes in a monospace font: CJK characters are two columns wide."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)
