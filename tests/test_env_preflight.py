"""utils.env.preflight: a broken set-up is explained in Chinese before torch is imported."""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

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


# The PyTorch APIs whose first release sets the course's minimum: (pattern in the repo, first version).
NEW_TORCH_APIS = {r"enable_gqa\s*=": (2, 5), r"nn\.RMSNorm\(|F\.rms_norm\(": (2, 4)}
ROOT = Path(__file__).resolve().parents[1]


def _course_sources() -> str:
    folders = ("solutions", "utils", "tests/bugbank")
    return "".join(p.read_text(encoding="utf-8") for folder in folders for p in (ROOT / folder).rglob("*")
                   if p.suffix in (".py", ".ipynb") and "reference" not in p.parts)


def test_min_torch_is_that_of_the_newest_api_the_course_calls():
    sources = _course_sources()
    used = {pattern: version for pattern, version in NEW_TORCH_APIS.items() if re.search(pattern, sources)}
    assert used == NEW_TORCH_APIS, f"no longer used (update the table): {set(NEW_TORCH_APIS) - set(used)}"
    need = max(used.values())
    assert env.MIN_TORCH == need, f"utils/env.py MIN_TORCH = {env.MIN_TORCH}, the APIs the course calls need {need}"


def test_pyproject_range_starts_at_min_torch_and_admits_the_tested_torch():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    spec = SpecifierSet(next(d for d in deps if re.match(r"torch\b", d))[len("torch"):])
    minimum = ".".join(map(str, env.MIN_TORCH))
    assert f"{minimum}.0" in spec
    below = f"{env.MIN_TORCH[0]}.{env.MIN_TORCH[1] - 1}.99"
    assert below not in spec, f"pyproject.toml admits torch {below}, older than utils/env.py's minimum {minimum}"
    assert "2.13.0" in spec and "3.0.0" not in spec


def test_a_torch_older_than_the_minimum_is_refused_with_the_reason():
    older = f"{env.MIN_TORCH[0]}.{env.MIN_TORCH[1] - 1}.1+cpu"
    with pytest.raises(env.EnvironmentProblem, match=r"enable_gqa"):
        env.preflight(version=lambda _name: older)
    env.preflight(version=lambda _name: f"{env.MIN_TORCH[0]}.{env.MIN_TORCH[1]}.0", font_dirs=())
