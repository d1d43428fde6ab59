#!/usr/bin/env python3
"""One entry point for learners, instructors and CI: ``python3 course.py --help`` lists the commands.

Only the standard library, in syntax Pythons from 3.7 on parse: a Python outside SUPPORTED_PYTHON, or a
machine torch 2.13 has no wheel for, is told what to do in Chinese before anything is created. Every
command parses its arguments first, so ``--help`` installs and runs nothing.

The environment (.venv) holds the learner's packages, at the versions of requirements.lock (a
``uv pip compile --universal`` of pyproject.toml, used as constraints); ``test`` adds the developers'
extra (``dev``), ``hub`` the ``hub`` extra. torch comes from PyTorch's CPU wheel index on Linux
without an NVIDIA GPU (the default index's Linux wheel pulls several GB of CUDA), from the default
index where that index cannot be reached or elsewhere. uv installs when it is on PATH or installs
from PyPI (into .venv, in seconds), with pip's configured package sources; pip otherwise
(COURSE_INSTALLER=pip forces it). The stamp .venv/.course-installed.json records the interpreter,
the inputs and the extras; .venv is made afresh when the interpreter changes or when the stamp is
missing (a creation or update that did not finish).
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import hashlib
import json
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
import urllib.request
import venv
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from utils import working_copy   # the learner's my_work/: standard library only, like this file

try:
    import fcntl
except ImportError:                # Windows
    fcntl = None

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
LOCK = ROOT / "requirements.lock"
# One supported range, also pyproject's requires-python, utils/env.py's MIN_PYTHON and the README's
# (tests/test_setup.py): torch 2.13's wheels are for CPython 3.10-3.14, and 3.10 reached its end of
# life in 2026-10 (the grading side reads TOML with 3.11's tomllib).
SUPPORTED_PYTHON = ((3, 11), (3, 14))
# The course is tested with exactly this torch (pyproject's range only admits it).
TORCH_PIN = "torch==2.13.0"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# torch 2.13.0's wheels (PyPI): (platform.system(), processor). Linux needs glibc >= 2.28 (manylinux_2_28),
# macOS 14 or later.
TORCH_WHEELS = {("Linux", "x86_64"), ("Linux", "aarch64"), ("Darwin", "aarch64"), ("Windows", "x86_64")}
FIRST_NOTEBOOK = "00_start_here/00_start_here.ipynb"   # in the learner's working copy
# JupyterLab defaults for the course: the interface in Simplified Chinese (the language pack is a learner
# dependency), which also makes the page zh-CN, so browsers draw the Chinese text with the Simplified
# Chinese glyphs of a CJK font (Noto Sans CJK otherwise shows its Japanese ones). A user setting wins:
# 设置 → 语言 → English - English.
LAB_DEFAULTS = {"@jupyterlab/translation-extension:plugin": {"locale": "zh_CN"}}


# --- the machine ----------------------------------------------------------------------------------

def version_text(version) -> str:
    return ".".join(map(str, version))


def this_machine() -> dict:
    """What decides whether torch 2.13 installs here: Python, OS, processor, word size, C library, macOS."""
    libc, libc_version = platform.libc_ver()
    return {"python": tuple(sys.version_info[:2]), "system": platform.system(),
            "machine": platform.machine().lower(), "bits": struct.calcsize("P") * 8,
            "glibc": libc_version if libc == "glibc" else None, "macos": platform.mac_ver()[0] or None}


def _older(version: str, than: str) -> bool:
    return tuple(int(p) for p in version.split(".")[:2]) < tuple(int(p) for p in than.split(".")[:2])


def setup_problem(machine: dict) -> str | None:
    """Why the course's environment cannot be made here and what to do, in Chinese; None if it can."""
    low, high = SUPPORTED_PYTHON
    python = version_text(machine["python"])
    where = (f"请安装 Python {version_text(low)}（课程在它上面测试；python.org，或 `uv python install "
             f"{version_text(low)}`），再用它运行，例如 `python{version_text(low)} course.py lab`。")
    if machine["python"] < low:
        return f"这个 Python 是 {python}，太旧了：本课程需要 Python {version_text(low)}–{version_text(high)}。{where}"
    if machine["python"] > high:
        return (f"这个 Python 是 {python}，太新了：课程用的 PyTorch 2.13 还没有 Python {python} 的安装包。{where}")
    if machine["bits"] != 64:
        return f"这是 32 位的 Python：PyTorch 只有 64 位的安装包。请安装 64 位的 Python {version_text(low)}。"
    system = machine["system"]
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine["machine"], machine["machine"])
    if system == "Darwin" and arch == "x86_64":
        return ("这是 Intel 芯片的 Mac（或在 Rosetta 下运行的 Intel 版 Python）：PyTorch 从 2.3 起不再为它提供安装包，"
                "而课程需要 PyTorch ≥ 2.5（07 节的 enable_gqa）。可以：点 README 里的 “launch binder” 在浏览器里学；"
                "或在 Linux 虚拟机、云主机上运行。如果你的 Mac 其实是 Apple 芯片（M1 及以后），"
                "请换装 arm64 版的 Python。")
    if (system, arch) not in TORCH_WHEELS:
        return (f"PyTorch 2.13 没有 {system} / {machine['machine']} 的安装包（只有 Linux x86_64 / aarch64、"
                "Apple 芯片的 macOS 和 64 位 Windows x86）。可以点 README 里的 “launch binder” 在浏览器里学。")
    if system == "Linux" and machine["glibc"] is None:
        return ("这个 Linux 用的不是 glibc（例如 Alpine 的 musl）：PyTorch 只有 glibc 系统的安装包（manylinux）。"
                "请换用 Debian、Ubuntu、Fedora 之类的系统或容器镜像。")
    if system == "Linux" and _older(machine["glibc"], "2.28"):
        return (f"系统的 glibc 是 {machine['glibc']}，太旧了：PyTorch 2.13 需要 glibc ≥ 2.28"
                "（Ubuntu 20.04、Debian 10、RHEL 8 或更新的系统）。")
    if system == "Darwin" and machine["macos"] and _older(machine["macos"], "14"):
        return f"这台 Mac 的系统是 macOS {machine['macos']}：PyTorch 2.13 需要 macOS 14 或更新的版本，请先升级系统。"
    return None


def nvidia_gpu() -> bool:
    return Path("/proc/driver/nvidia/version").exists() or shutil.which("nvidia-smi") is not None


def reachable(url: str, timeout: float = 8) -> bool:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def torch_index(system: str, gpu: bool, candidate: str | None = None) -> str | None:
    """Where torch comes from: PyTorch's CPU index on Linux without an NVIDIA GPU if it answers (or
    $COURSE_TORCH_INDEX; "default" for the default index); None for the default index."""
    candidate = candidate or os.environ.get("COURSE_TORCH_INDEX") or TORCH_CPU_INDEX
    if system != "Linux" or gpu or candidate == "default":
        return None
    if reachable(candidate.rstrip("/") + "/torch/"):
        return candidate
    print(f"! 连不上 PyTorch 的 CPU 安装源 {candidate}，改从默认的源安装 torch：Linux 上那是带 CUDA 的版本，"
          "要多下载几 GB。网络好了以后删掉 .venv 再运行一次，就会换成 CPU 版。", flush=True)
    return None


# --- the environment ------------------------------------------------------------------------------

def venv_bin(name: str, venv_dir: Path | None = None) -> Path:
    folder = (venv_dir or VENV) / ("Scripts" if os.name == "nt" else "bin")
    return folder / (f"{name}.exe" if os.name == "nt" else name)


def venv_python(venv_dir: Path | None = None) -> Path:
    return venv_bin("python", venv_dir)


def stamp_path(venv_dir: Path | None = None) -> Path:
    return (venv_dir or VENV) / ".course-installed.json"


def interpreter() -> dict:
    """The Python .venv is made from (the same whether this runs from it or from .venv itself)."""
    return {"prefix": sys.base_prefix, "version": platform.python_version(), "implementation": sys.implementation.name}


def inputs_digest() -> str:
    return hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + LOCK.read_bytes()).hexdigest()


def read_stamp(venv_dir: Path | None = None) -> dict | None:
    try:
        return json.loads(stamp_path(venv_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def run(*cmd, **kw) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, cwd=kw.pop("cwd", ROOT), **kw)


@contextlib.contextmanager
def one_setup_at_a_time():
    """Concurrent course.py runs (parallel tests, a second terminal) set up one after the other, so that
    none takes another's unfinished install for a broken one (a lock on this file; none on Windows)."""
    if fcntl is None:
        yield
        return
    with open(__file__, "rb") as this_file:
        fcntl.flock(this_file, fcntl.LOCK_EX)
        yield


def setup(extras: tuple[str, ...] = ()) -> Path:
    """Create or update .venv with the learner's packages and ``extras``; its Python."""
    problem = setup_problem(this_machine())
    if problem:
        raise SystemExit(f"✗ {problem}")
    with one_setup_at_a_time():
        return _setup(extras)


def _setup(extras: tuple[str, ...]) -> Path:
    python, recorded = venv_python(), read_stamp()
    if (recorded and python.exists() and recorded.get("python") == interpreter()
            and recorded.get("inputs") == inputs_digest() and set(extras) <= set(recorded.get("extras", ()))):
        write_lab_defaults(VENV / "etc" / "jupyter")
        return python
    if VENV.exists() and not (recorded and recorded.get("python") == interpreter()):
        remake_venv(recorded)
    extras = tuple(sorted(set(extras) | set(recorded.get("extras", ()) if recorded else ())))
    if not python.exists():
        print(f"创建虚拟环境 {VENV} …", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    stamp_path().unlink(missing_ok=True)          # until this install has finished
    install(python, extras)
    write_lab_defaults(VENV / "etc" / "jupyter")  # the environment's own config directory
    stamp_path().write_text(json.dumps({"python": interpreter(), "inputs": inputs_digest(), "extras": extras},
                                       indent=1) + "\n", encoding="utf-8")
    return python


def remake_venv(recorded: dict | None) -> None:
    if Path(sys.prefix).resolve() == VENV.resolve():
        raise SystemExit(f"✗ {VENV} 需要重新创建，不能用它自己的 Python 来做：请用系统的 python3 运行 course.py。")
    reason = ("上次的创建或更新没有完成" if recorded is None else
              f"它是用另一个 Python（{recorded['python']['version']}，{recorded['python']['prefix']}）创建的")
    print(f"重新创建 {VENV}：{reason}。", flush=True)
    shutil.rmtree(VENV)


def install(python: Path, extras: tuple[str, ...]) -> None:
    """torch first (from the CPU index where that applies), then the course package, both held to the lock."""
    installer = installer_command(python)
    index = torch_index(platform.system(), nvidia_gpu())
    cuda = index is None and platform.system() == "Linux"
    print(f"安装 torch（{'CPU 版，来自 ' + index if index else '来自默认的源'}）和课程的依赖：第一次要下载"
          f"{'几 GB（torch 带 CUDA）' if cuda else '约 430 MB'}，下面显示下载进度。", flush=True)
    run(*with_index(installer, index), TORCH_PIN)
    package = f".[{','.join(extras)}]" if extras else "."
    run(*installer, "-e", package, TORCH_PIN, "-c", LOCK)
    # jsonschema's optional IRI-format checker, pulled in by jupyter-events: importing it compiles a
    # grammar (1.2 s here) in every process that imports nbformat — each nbgrader command, grading
    # worker and Jupyter server. Nothing in the course validates IRIs, and `pip check` stays clean.
    if installer[0] == python:
        run(python, "-m", "pip", "uninstall", "--disable-pip-version-check", "-y", "-q", "rfc3987-syntax")
    else:
        run(installer[0], "pip", "uninstall", "--python", python, "rfc3987-syntax")


def with_index(installer: list, index: str | None) -> list:
    """``installer`` taking packages from ``index`` instead of its default one (if ``index``)."""
    if index is None:
        return installer
    at = installer.index("--index-url") if "--index-url" in installer else len(installer)
    return [*installer[:at], *installer[at + 2:], "--index-url", index]


def installer_command(python: Path) -> list:
    """``uv pip install`` into .venv with pip's package sources, or pip's own ``install``."""
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check"]
    uv = None if os.environ.get("COURSE_INSTALLER") == "pip" else find_uv(python)
    if uv is None:
        return pip
    sources = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    # bytecode compiled at install, as pip does: otherwise every kernel compiles torch's modules again where
    # .pyc files are not written (PYTHONDONTWRITEBYTECODE)
    return [uv, "pip", "install", "--python", python, "--compile-bytecode", *uv_source_options(sources)]


def find_uv(python: Path) -> Path | None:
    """uv on PATH or in .venv; else installed into .venv from PyPI (17 MB, seconds); None if that fails."""
    for found in (shutil.which("uv"), venv_bin("uv")):
        if found and Path(found).exists():
            return Path(found)
    print("安装 uv（比 pip 快得多的安装工具）…", flush=True)
    try:
        run(python, "-m", "pip", "install", "--disable-pip-version-check", "-q", "uv")
    except subprocess.CalledProcessError:
        print("! 装不上 uv，改用 pip（慢一些）。", flush=True)
        return None
    return venv_bin("uv")


# pip's settings that say where packages come from -> uv's options of the same meaning
UV_SOURCE_OPTIONS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links"}


def uv_source_options(pip_config_list: str) -> list[str]:
    """uv's options for the package sources pip is configured with (``pip config list``: a mirror's
    index, local wheels), which uv does not read itself; pip's choice of the best version across
    several indexes too (uv takes the first index that has a package unless told otherwise)."""
    pairs = {}   # a dict for its order: the same source set in two places (e.g. pip.conf and $PIP_...) once
    for line in pip_config_list.splitlines():
        key, _, value = line.partition("=")
        flag = UV_SOURCE_OPTIONS.get(key.rsplit(".", 1)[-1])
        for item in ast.literal_eval(value).split() if flag else ():
            pairs[flag, item] = None
    if any(flag == "--extra-index-url" for flag, _ in pairs):
        pairs["--index-strategy", "unsafe-best-match"] = None
    return [part for pair in pairs for part in pair]


def write_lab_defaults(config_dir: Path = Path(sys.prefix, "etc", "jupyter")) -> None:
    """Write LAB_DEFAULTS where JupyterLab reads default settings in ``config_dir`` (by default that of
    the running environment: ``python -c 'import course; course.write_lab_defaults()'`` for conda, Binder)."""
    target = config_dir / "labconfig" / "default_setting_overrides.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(LAB_DEFAULTS, indent=2) + "\n", encoding="utf-8")


# --- the commands ---------------------------------------------------------------------------------

def lab_command(python: Path, work: Path) -> list:
    """JupyterLab on the course folder (solutions/ and all) opening the first notebook of the working
    copy ``work``; on ``work`` itself where it is elsewhere ($COURSE_WORK)."""
    top = ROOT if work.is_relative_to(ROOT) else work
    cmd = [python, "-m", "jupyter", "lab", f"--ServerApp.root_dir={top}", work / FIRST_NOTEBOOK]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    return cmd


def lab(_args, extra: list[str]) -> None:
    python = setup()
    for line in working_copy.sync(ROOT):   # new sections in, updates merged or offered beside
        print(line, flush=True)
    run(*lab_command(python, working_copy.work_folder(ROOT)), *extra)


def test(_args, extra: list[str]) -> None:
    python = setup(("dev",))
    # worksteal: a worker that runs out of tests takes some from a busy one (notebook and grading
    # tests take minutes; most take milliseconds); the ten slowest are listed at the end.
    # --quick (tests/conftest.py) leaves out the slow tier: nbgrader, the sandbox, the browser, all but one notebook.
    # Two workers more than cores: with one per core the CPU idled a third of the run (user+sys 18.5 min in
    # 16.2 min on 2 cores), with one more still 30 %: the hub, browser, pip and nbgrader tests wait on
    # their subprocesses.
    workers = str((os.cpu_count() or 1) + 2)
    # More processes than cores: one torch thread each (as autograder.grade gives parallel kernels), so
    # that no process's idle threads spin on a core another one needs (10 % less CPU for the notebooks).
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    run(python, "-m", "pytest", "-n", workers, "--dist", "worksteal", "--durations=10", *extra, env=env)


def build(args, _extra) -> None:
    sections = [working_copy.pick_section(ROOT / "solutions", name) for name in args.sections]
    python = setup()
    run(python, "-m", "autograder.build", *sections)
    # the checks' stored results, recorded from the bug bank: a developers' entry point in tests/,
    # since the bank holds correct variants (answers) and never ships in the package
    run(python, "-m", "tests.record_fixtures")


def progress(_args, _extra) -> None:
    run(setup(), "-m", "utils.progress")


def edition(_args, extra: list[str]) -> None:
    run(setup(), "-m", "autograder.edition", *extra)


# What `hub` installs besides the learner's packages (pyproject.toml's extra "hub" holds the versions).
HUB_INSTALLS = ("hub 会先在 .venv 里装上 pyproject.toml 的 hub 附加依赖：JupyterHub、PostgreSQL 驱动 psycopg、"
                "jupyterhub-idle-culler、systemdspawner；configurable-http-proxy（npm）和 PostgreSQL（apt）"
                "要另装，见 docs/jupyterhub.md §2。")


def hub(_args, extra: list[str]) -> None:
    print(HUB_INSTALLS, flush=True)
    run(setup(("hub",)), ROOT / "deploy" / "jupyterhub" / "classroom.py", *extra)


def reset(args, _extra) -> None:
    for line in working_copy.reset(ROOT, args.section, args.exercise):
        print(line)


def setup_command(args, _extra) -> None:
    setup(("dev",) if args.dev else ())
    print(f"✓ 环境已就绪：{VENV}")


class ChineseParser(argparse.ArgumentParser):
    """argparse with Chinese headings (its own messages stay as argparse words them)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, add_help=False, allow_abbrev=False, **kwargs)
        self._positionals.title, self._optionals.title = "参数", "选项"
        self.add_argument("-h", "--help", action="help", help="显示这段说明，然后退出（什么都不安装、不运行）")

    def format_usage(self) -> str:
        return super().format_usage().replace("usage: ", "用法：", 1)

    def format_help(self) -> str:
        return super().format_help().replace("usage: ", "用法：", 1)

    def error(self, message: str):
        message = re.sub(r"argument 命令: invalid choice: (\S+) .*", r"没有 \1 这个命令", message)
        self.print_usage(sys.stderr)
        self.exit(2, f"错误：{message}\n（python3 course.py --help 列出全部命令，"
                     "python3 course.py <命令> --help 说明一个命令）\n")


class Command(NamedTuple):
    summary: str            # one line in the list of commands
    description: str        # its own --help
    function: Callable
    passes_to: str | None   # whose options the unknown ones are, if any
    usage: str | None = None


COMMANDS = {
    "lab": Command(
        "打开 JupyterLab 学习（第一次会先建好环境）",
        "第一次运行时创建 .venv、安装学习用的依赖，把 notebooks/ 复制成你的工作副本 my_work/；以后每次补上新的章节，"
        "把课程的更新合进你做过的 notebook（你的答案保留）。然后在 JupyterLab 里打开 "
        "my_work/00_start_here/00_start_here.ipynb。\n例：python3 course.py lab --no-browser --port=8899",
        lab, "JupyterLab（jupyter lab --help 列出它们）"),
    "progress": Command(
        "我做到哪了：逐节列出每个练习通过、没通过还是没开始",
        "用全新的内核运行你保存在 my_work/ 里的练习和可见检查，逐节列出 ✓ 通过 / ✗ 没通过（附误区代码）/ "
        "○ 未开始，以及简答题写了没有；不改动你的 notebook。",
        progress, None),
    "reset": Command(
        "把一节（或其中一个练习）恢复成发布版，原来的先备份",
        "把 my_work/ 里的一本 notebook 整本恢复成 notebooks/ 里的发布版，或只恢复其中一个练习（写出它的名字，"
        "例如 softmax 或 answer_shape_reasoning）。改动之前，你原来的 notebook 先复制到 my_work/backups/。"
        "\n例：python3 course.py reset 02 softmax",
        reset, None),
    "setup": Command(
        "只创建或更新 .venv（lab、progress 等命令会自动做这一步）",
        "检查 Python 版本和平台，创建 .venv，按 requirements.lock 安装学习用的依赖（Linux 上没有 NVIDIA 显卡时装 "
        "CPU 版的 torch）；有 uv（或能从 PyPI 装上 uv）时用 uv，否则用 pip。",
        setup_command, None),
    "test": Command(
        "安装测试工具并运行全部测试（CI 运行的就是这一条）",
        "在学习用的依赖之外安装开发者工具（pytest、playwright、ruff、JupyterHub……），然后运行 pytest。"
        "--quick 是快速档。\n例：python3 course.py test --quick -k working_copy",
        test, "pytest（python3 course.py test -- --help 显示 pytest 的说明）"),
    "build": Command(
        "从 solutions/ 重新生成 notebooks/、utils/reference/ 和检查的存储结果",
        "教师和开发者用：nbgrader 从 solutions/ 生成学生版 notebooks/，导出参考实现 utils/reference/，"
        "再用误区库记录 utils/checks/fixtures/。不写节名时生成全部。"
        "\n例：python3 course.py build 02_scaling_and_softmax",
        build, None),
    "edition": Command(
        "生成学生安装的班级版（不含未截止作业的答案）",
        "课程包去掉未截止作业的参考实现、答案、隐藏测试和测验答案，学生的环境里 pip install 它（见教师指南 §4）。",
        edition, "autograder.edition",
        "python3 course.py edition student 输出文件夹 [--answers-through 已截止的最后一节]"),
    "hub": Command(
        "以 root 在本机的 JupyterHub 上开一个班（docs/jupyterhub.md）",
        "以 root 运行：每人一个 Unix 账号，formgrader 作为 Hub service（docs/jupyterhub.md）。"
        "demo 是一个用完即删的演示班。" + HUB_INSTALLS,
        hub, "deploy/jupyterhub/classroom.py",
        "python3 course.py hub demo [--port 端口] | hub setup class.toml | hub start class.toml"),
}


def parser() -> ChineseParser:
    top = ChineseParser(prog="python3 course.py", description="注意力机制课程：学习者、教师和 CI 的统一入口。",
                        epilog="第一次学习：python3 course.py lab\n每个命令的说明：python3 course.py <命令> --help")
    commands = top.add_subparsers(dest="command", required=True, metavar="命令", title="命令", help="下面之一",
                                  parser_class=ChineseParser)
    for name, command in COMMANDS.items():
        rest = f"\n\n其余的选项和参数原样交给 {command.passes_to}。" if command.passes_to else ""
        sub = commands.add_parser(name, help=command.summary, description=command.description + rest,
                                  usage=command.usage)
        sub.set_defaults(function=command.function, passes_through=command.passes_to is not None)
    commands.choices["setup"].add_argument("--dev", action="store_true", help="也安装开发者工具（pytest 等）")
    commands.choices["build"].add_argument("sections", nargs="*", metavar="节",
                                           help="只生成这几节（例如 02 或 02_scaling_and_softmax）")
    commands.choices["reset"].add_argument("section", metavar="节", help="哪一节，例如 02 或 02_scaling_and_softmax")
    commands.choices["reset"].add_argument("exercise", nargs="?", metavar="练习",
                                           help="只恢复这个练习（或简答题）；不写就整本恢复")
    return top


def main(argv: list[str] | None = None) -> int:
    cli = parser()
    args, extra = cli.parse_known_args(argv)
    if extra and not args.passes_through:
        cli.error(f"{args.command} 不认识这些参数：{' '.join(extra)}")
    if extra[:1] == ["--"]:
        extra = extra[1:]
    try:
        args.function(args, extra)
    except subprocess.CalledProcessError as err:
        return err.returncode
    except working_copy.WorkingCopyError as err:
        print(f"✗ {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
