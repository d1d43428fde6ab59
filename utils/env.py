"""The environment check of section 00: versions, device, CJK font, course files."""
from __future__ import annotations

import importlib.metadata as metadata
import platform
import sys
import unicodedata

import torch

PACKAGES = ("torch", "numpy", "matplotlib", "ipywidgets", "jupyterlab", "nbgrader")


def device() -> torch.device:
    """CUDA if present, otherwise CPU (the whole course runs on CPU)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def report() -> dict[str, str]:
    """Versions and device, as a dict (printed by ``print_report``)."""
    info = {"Python": sys.version.split()[0], "系统": f"{platform.system()} {platform.machine()}"}
    for name in PACKAGES:
        try:
            info[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            info[name] = "未安装"
    info["设备"] = str(device()) + ("" if torch.cuda.is_available() else "（没有 GPU 也没关系，本课程全部在 CPU 上运行）")
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
