"""pyproject.toml tells the truth: every module the package and the learner notebooks import is a declared
dependency, nothing the package ships imports the tests (the bug bank holds answers), the licence is an
SPDX expression with its file, the version moves with the changelog, and requirements.lock pins every
learner dependency inside pyproject's range."""
from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from .conftest import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]
PACKAGES = PYPROJECT["tool"]["setuptools"]["packages"]
OWN = {name.split(".")[0] for name in PACKAGES}


def imported_modules(tree: ast.AST) -> set[str]:
    """The top-level modules ``tree`` imports (absolute imports only)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def package_imports() -> dict[str, set[str]]:
    """Module -> the files of the package's folders that import it."""
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package.replace(".", "/")).glob("*.py"):
            for module in imported_modules(ast.parse(path.read_text(encoding="utf-8"))):
                found.setdefault(module, set()).add(path.relative_to(ROOT).as_posix())
    return found


def notebook_imports() -> dict[str, set[str]]:
    """Module -> the learner notebooks whose code cells import it (IPython's % and ! lines left out)."""
    found = {}
    for path in sorted((ROOT / "notebooks").glob("*/*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "code":
                code = "\n".join(line for line in "".join(cell["source"]).splitlines()
                                 if not line.lstrip().startswith(("%", "!")))
                for module in imported_modules(ast.parse(code)):
                    found.setdefault(module, set()).add(path.name)
    return found


def third_party(found: dict[str, set[str]]) -> dict[str, set[str]]:
    return {m: files for m, files in found.items() if m not in sys.stdlib_module_names and m not in OWN | {"tests"}}


def declared(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in requirements}


def undeclared(found: dict[str, set[str]], allowed: set[str], installed_only: bool = False) -> dict[str, set[str]]:
    """The modules of ``found`` no distribution in ``allowed`` provides (nor any installed one, unless
    ``installed_only``: then only those an undeclared installed distribution provides)."""
    providers = importlib.metadata.packages_distributions()
    return {m: files for m, files in third_party(found).items()
            if not {canonicalize_name(d) for d in providers.get(m, [])} & allowed
            and (providers.get(m) or not installed_only)}


def test_the_import_scan_finds_what_a_file_imports():
    tree = ast.parse("import torch.nn as nn\nfrom IPython.display import display\nfrom . import sibling\nimport os\n")
    assert imported_modules(tree) == {"torch", "IPython", "os"}
    assert undeclared({"IPython": {"x.py"}, "os": {"x.py"}}, {"torch"}) == {"IPython": {"x.py"}}
    assert undeclared({"IPython": {"x.py"}}, {"ipython"}) == {}
    assert undeclared({"no_such_module": {"x.py"}}, set()) == {"no_such_module": {"x.py"}}
    assert undeclared({"no_such_module": {"x.py"}}, set(), installed_only=True) == {}


def test_every_runtime_import_is_a_declared_dependency():
    missing = undeclared({**notebook_imports(), **package_imports()}, declared(PROJECT["dependencies"]))
    assert not missing, f"imported but not in pyproject.toml's dependencies: {missing}"


def test_every_test_import_is_declared_for_developers():
    found = {}
    for path in (ROOT / "tests").rglob("*.py"):
        for module in imported_modules(ast.parse(path.read_text(encoding="utf-8"))):
            found.setdefault(module, set()).add(path.name)
    extras = PROJECT["optional-dependencies"]
    allowed = declared(PROJECT["dependencies"]) | declared(extras["dev"]) | declared(extras["hub"])
    # installed only: the tests also import the repository's own course.py and deploy/, and modules they write
    missing = undeclared(found, allowed, installed_only=True)
    assert not missing, f"imported by the tests but declared nowhere: {missing}"


def test_nothing_the_package_ships_imports_the_tests():
    """tests/ holds the bug bank, whose right variants are answers: the class edition must never need it."""
    importers = package_imports().get("tests", set())
    assert not importers, f"the package imports tests/: {sorted(importers)}"
    assert not any(p.startswith("tests") for p in PACKAGES)


def test_the_licence_is_an_spdx_expression_with_its_file():
    assert PROJECT["license"] == "MIT" and PROJECT["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")
    setuptools = Requirement(next(r for r in PYPROJECT["build-system"]["requires"] if r.startswith("setuptools")))
    assert setuptools.specifier.contains("77.0.0") and not setuptools.specifier.contains("76.9")
    assert any(s.operator == "<" for s in setuptools.specifier), "an upper bound: builds that stay the same"


def test_the_version_is_the_changelogs_newest():
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    versions = re.findall(r"^## \[?(\d+\.\d+\.\d+)\]?", changelog, flags=re.M)
    assert versions and versions[0] == PROJECT["version"], "bump pyproject.toml's version with a CHANGELOG entry"
    assert len(set(versions)) == len(versions)


@pytest.mark.slow
def test_setuptools_builds_the_metadata_without_a_warning(tmp_path):
    """The metadata a wheel gets: the licence expression and file, the declared dependencies, no
    deprecation of the project table (setuptools' warnings made errors)."""
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, tmp_path / name)
    for package in {p.split(".")[0] for p in PACKAGES}:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "out").mkdir()
    code = ("import sys; from setuptools import build_meta; "
            "print(build_meta.prepare_metadata_for_build_wheel(sys.argv[1]))")
    done = subprocess.run([sys.executable, "-W", "error", "-c", code, str(tmp_path / "out")], cwd=tmp_path,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    metadata = (tmp_path / "out" / done.stdout.strip().splitlines()[-1] / "METADATA").read_text(encoding="utf-8")
    assert "License-Expression: MIT" in metadata and "License-File: LICENSE" in metadata
    assert f"Version: {PROJECT['version']}" in metadata
    assert "Requires-Dist: nbformat" in metadata and "Requires-Dist: jupyterlab-language-pack-zh-CN" in metadata


# --- the lockfile ---------------------------------------------------------------------------------

def lock_entries() -> list[tuple[str, str, str]]:
    """requirements.lock: (package, pinned version, its "# via" comment), one per line pinning a package
    (a package has several where the universal lock forks by platform or Python)."""
    entries = []
    for line in (ROOT / "requirements.lock").read_text(encoding="utf-8").splitlines():
        match = re.match(r"([A-Za-z0-9._-]+)==([^\s;]+)", line)
        if match:
            entries.append((canonicalize_name(match[1]), match[2], ""))
        elif line.startswith("    #") and entries:
            entries[-1] = (*entries[-1][:2], entries[-1][2] + line)
    return entries


def test_the_lockfile_pins_every_learner_dependency_inside_its_range():
    pins = {}
    for name, version, _ in lock_entries():
        pins.setdefault(name, []).append(version)
    for text in PROJECT["dependencies"]:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not in requirements.lock: rerun its header's uv pip compile"
        for version in pins[name]:
            assert requirement.specifier.contains(version, prereleases=True), \
                f"requirements.lock pins {name}=={version}, outside pyproject's {requirement.specifier}"


def test_the_lockfile_is_the_universal_compile_of_the_learner_dependencies():
    header = (ROOT / "requirements.lock").read_text(encoding="utf-8").splitlines()[1]
    assert "uv pip compile pyproject.toml --universal" in header
    entries = lock_entries()
    direct = {name for name, _, via in entries if "attention-course (pyproject.toml)" in via}
    assert direct == declared(PROJECT["dependencies"]), "the lock's direct dependencies are pyproject's"
    assert not {"pytest", "playwright", "ruff", "jupyterhub"} & {name for name, _, _ in entries}, \
        "developers' tools in the learner's lock"
