"""The learner's working copy: their notebooks, where neither a rebuild nor ``git pull`` reaches.

``notebooks/`` is the release (generated from ``solutions/`` by ``python3 course.py build``, and
tracked by git). A self-study learner works in ``my_work/`` instead (ignored by git), which
:func:`sync` keeps beside the release:

* the first run copies every section of ``notebooks/``;
* a later run copies the sections (and files) that are new in the release, and the release of a
  file the learner removed or renamed (so deleting one's copy is how to start it afresh);
* a file whose release changed since it was copied is replaced only if the learner never changed
  their copy (it then holds no work of theirs); otherwise the new release is put beside it as
  ``<name>.new.ipynb``, with a one-line Chinese message, and the learner's file is left byte for byte.

``my_work/.release.json`` records, for every file, the SHA-256 of the release it was copied from
(``copied``) and of the release last offered beside it (``offered``). ``COURSE_WORK`` names another
folder for the working copy. Only the standard library: ``course.py`` runs it on a bare Python.

    python3 course.py lab        (syncs, then opens JupyterLab in the working copy)
    python -m utils.working_copy (only the sync)
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RELEASE = "notebooks"
WORK = "my_work"
MANIFEST = ".release.json"
SECTION_FOLDER = re.compile(r"\d\d_\w+")
SKIPPED = {".ipynb_checkpoints", "__pycache__"}


def work_folder(root: Path = ROOT) -> Path:
    """Where the learner's notebooks are: ``$COURSE_WORK`` if set, else ``my_work/`` of the course."""
    return Path(os.environ.get("COURSE_WORK") or root / WORK).expanduser().resolve()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def released_files(release: Path) -> list[Path]:
    """Every file of every section folder of the release, relative to it."""
    if not release.is_dir():
        return []
    return sorted(p.relative_to(release) for section in release.iterdir()
                  if section.is_dir() and SECTION_FOLDER.fullmatch(section.name)
                  for p in section.rglob("*") if p.is_file() and not SKIPPED & set(p.parts))


def offered_name(path: Path) -> Path:
    """Where a changed release goes beside the learner's file: ``07_x.ipynb`` → ``07_x.new.ipynb``."""
    return path.with_name(f"{path.stem}.new{path.suffix}")


def sync(root: Path = ROOT, work: Path | None = None) -> list[str]:
    """Bring the working copy up to the release of ``root`` without changing any learner's work;
    one Chinese line per thing done (nothing when nothing changed)."""
    release, work = root / RELEASE, work or work_folder(root)
    manifest_path = work / MANIFEST
    first = not manifest_path.is_file()
    manifest = {} if first else json.loads(manifest_path.read_text(encoding="utf-8"))
    messages = []
    for rel in released_files(release):
        record = manifest.setdefault(rel.as_posix(), {})
        if message := _sync_file(release / rel, work / rel, record):
            messages.append(message.format(path=(work / rel).relative_to(work.parent),
                                           release=Path(RELEASE, rel).as_posix()))
    work.mkdir(parents=True, exist_ok=True)
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    if first:
        return [f"第一次运行：把 {RELEASE}/ 的 {len(manifest)} 个文件复制到了 {work}，你的练习都写在那里"
                f"（git 不跟踪它，重新生成 {RELEASE}/ 或 git pull 都不会碰它）。"]
    return messages


def _sync_file(source: Path, target: Path, record: dict) -> str | None:
    """Sync one file; ``record`` (its manifest entry) is updated in place. The message may name
    ``{path}`` (the learner's file) and ``{release}`` (the released one)."""
    new = sha256(source)
    if not target.exists():                           # a new section, or the learner removed their copy
        _copy(source, target)
        known = "copied" in record
        record.update(copied=new, offered=None)
        return "重新复制了发布版（原来的被删除或改名了）：{path}" if known else "新增：{path}"
    if new in (record.get("copied"), record.get("offered")):
        return None                                   # nothing released since the copy or the offer
    if sha256(target) == record.get("copied"):        # the learner never changed it: no work to lose
        _copy(source, target)
        record.update(copied=new, offered=None)
        return "已更新（你没有改动过它）：{path}"
    offer = offered_name(target)
    if offer.exists() and sha256(offer) != record.get("offered"):
        return f"{{path}} 有新版本 {{release}}；旁边的 {offer.name} 你改动过，没有覆盖它。"
    _copy(source, offer)
    record["offered"] = new
    return (f"{{path}} 有新版本：放在旁边的 {offer.name}，你的 notebook 没有改动"
            f"（想整本换成新版，就把你的文件改名或删掉，再运行一次 lab）。")


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


if __name__ == "__main__":
    for line in sync():
        print(line)
