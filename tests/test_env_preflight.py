"""utils.env.preflight: a broken set-up is explained in Chinese before torch is imported."""
from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from utils import env


def test_preflight_imports_nothing_heavy():
    code = ("import sys, utils.env as e; e.preflight(); "
            "assert 'torch' not in sys.modules and 'matplotlib' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_missing_package_old_torch_and_old_python_are_explained():
    def missing(name):
        return None if name == "torch" else importlib.util.find_spec(name)
    with pytest.raises(env.EnvironmentProblem, match="缺少 torch"):
        env.preflight(find_spec=missing)
    with pytest.raises(env.EnvironmentProblem, match="PyTorch 版本是 1.13.1"):
        env.preflight(version=lambda _name: "1.13.1+cpu")
    with pytest.raises(env.EnvironmentProblem, match="Python 版本是 3.8"):
        env.preflight(python=(3, 8))


def test_missing_chinese_font_is_a_warning(capsys):
    def no_fonts(name):
        return None if name == "mplfonts" else importlib.util.find_spec(name)
    warnings = env.preflight(find_spec=no_fonts, font_dirs=())
    assert warnings and "中文字体" in capsys.readouterr().out
