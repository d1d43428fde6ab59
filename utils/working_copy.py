"""The learner's working copy: their notebooks, where neither a rebuild nor ``git pull`` reaches.

``notebooks/`` is the release (generated from ``solutions/`` by ``python3 course.py build``, and
tracked by git). A self-study learner works in ``my_work/`` instead (ignored by git), which
:func:`sync` keeps beside the release:

* the first run copies every section of ``notebooks/``;
* a later run copies the sections (and files) that are new in the release, and the release of a
  file the learner removed or renamed (so deleting one's copy is how to start it afresh);
* a notebook whose release changed since it was copied is compared by what the learner wrote — the
  cells' sources, not the file's bytes: opening a notebook (a kernel start, an autosave, outputs,
  metadata) changes nothing. Unchanged, it is replaced by the new release. Changed only in its answer
  cells (nbgrader's solution cells, code exercises and written answers alike), it becomes the new
  release with those cells put back by their nbgrader cell id (``grade_id``). Changed elsewhere too
  (a scratch cell, an edited demo), or holding an answer the new release has no cell for, it is left
  as it is and the new release, with every answer that fits put in, goes beside it as
  ``<name>.new.ipynb``: a one-line Chinese message says how to compare the two (nbdime's ``nbdiff-web``).

:func:`reset` restores one notebook, or one exercise of it, from the release, after copying the
learner's file to ``my_work/backups/``.

``my_work/.release.json`` records, for every file, the SHA-256 of the release it holds (``copied``),
fingerprints of that release's course cells and answer cells (``course``, ``answers``), and of the
release last offered beside it (``offered``, and ``offer``: what was written there). ``COURSE_WORK``
names another folder for the working copy. Only the standard library: ``course.py`` runs it on a bare
Python.

    python3 course.py lab                      (syncs, then opens JupyterLab in the working copy)
    python3 course.py reset 02 [softmax]       (restores a notebook, or one exercise of it)
    python -m utils.working_copy               (only the sync)
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import time
from pathlib import Path

from utils.sections import section_ids

ROOT = Path(__file__).resolve().parents[1]
RELEASE = "notebooks"
WORK = "my_work"
MANIFEST = ".release.json"
BACKUPS = "backups"
SKIPPED = {".ipynb_checkpoints", "__pycache__"}
COMPARE = "比较两份：nbdiff-web {mine} {offer}（nbdime，在浏览器里并排显示差异；命令行版是 nbdiff）"


class WorkingCopyError(RuntimeError):
    """What the learner asked for cannot be done; the message says why, in Chinese."""


def work_folder(root: Path = ROOT) -> Path:
    """Where the learner's notebooks are: ``$COURSE_WORK`` if set, else ``my_work/`` of the course."""
    return Path(os.environ.get("COURSE_WORK") or root / WORK).expanduser().resolve()


def sha256(data: bytes | Path) -> str:
    return hashlib.sha256(data.read_bytes() if isinstance(data, Path) else data).hexdigest()


def released_files(release: Path) -> list[Path]:
    """Every file of every section folder of the release, relative to it."""
    return sorted(p.relative_to(release) for section in section_ids(release)
                  for p in (release / section).rglob("*") if p.is_file() and not SKIPPED & set(p.parts))


def offered_name(path: Path) -> Path:
    """Where a changed release goes beside the learner's file: ``07_x.ipynb`` → ``07_x.new.ipynb``."""
    return path.with_name(f"{path.stem}.new{path.suffix}")


def pick_section(folder: Path, name: str) -> str:
    """The section folder of ``folder`` that ``name`` names: its full name or its number (``02``)."""
    sections = section_ids(folder)
    found = [s for s in sections if name in (s, s[:2])]
    if not found:
        raise WorkingCopyError(f"{folder.name}/ 里没有 {name!r} 这一节（可选：{'、'.join(sections)}）")
    return found[0]


# --- notebooks as the learner wrote them ----------------------------------------------------------

def read_notebook(path: Path) -> dict | None:
    """The notebook at ``path``, or None if it is not one (not JSON, or no cells)."""
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return nb if isinstance(nb, dict) and isinstance(nb.get("cells"), list) else None


def write_notebook(nb: dict, path: Path) -> None:
    """As nbformat writes it (and JupyterLab saves it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def source(cell: dict) -> str:
    text = cell.get("source", "")
    return "".join(text) if isinstance(text, list) else text


def answer_id(cell: dict) -> str | None:
    """The nbgrader cell id of a cell the learner answers in (a solution cell: a code exercise or a
    written answer), else None."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta.get("grade_id") if meta.get("solution") else None


def grade_id(cell: dict) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def cell_print(cell: dict) -> str:
    return sha256(f"{cell.get('cell_type')}\0{source(cell)}".encode())


def parts(nb: dict) -> tuple[str, dict[str, str]]:
    """What a notebook says, in two parts: a fingerprint of its course cells (every cell that is not an
    answer cell, in order) and one of each answer cell, by its id. Outputs and metadata are left out."""
    course, answers = [], {}
    for cell in nb["cells"]:
        gid = answer_id(cell)
        if gid is None or gid in answers:     # a copied answer cell (same id twice) is not the answer
            course.append(cell_print(cell))
        else:
            answers[gid] = cell_print(cell)
    return sha256("\n".join(course).encode()), answers


def file_parts(path: Path) -> tuple[str, dict[str, str]]:
    nb = read_notebook(path) if path.suffix == ".ipynb" else None
    return parts(nb) if nb is not None else (sha256(path), {})


def fingerprint(path: Path) -> str:
    """Of everything a file says: its bytes, or a notebook's cell sources."""
    course, answers = file_parts(path)
    return sha256(json.dumps([course, answers], sort_keys=True).encode())


def merge(mine: dict, release: dict) -> tuple[dict, list[str]]:
    """``release`` with the sources of the learner's answer cells of ``mine`` in place of its own, matched
    by nbgrader cell id; and the ids it carried over."""
    answers = {}
    for cell in mine["cells"]:
        gid = answer_id(cell)
        if gid is not None:
            answers.setdefault(gid, source(cell))
    merged, carried = copy.deepcopy(release), []
    for cell in merged["cells"]:
        gid = answer_id(cell)
        if gid in answers:
            cell["source"] = answers[gid]
            carried.append(gid)
    return merged, carried


# --- the sync -------------------------------------------------------------------------------------

def release_record(path: Path) -> dict:
    course, answers = file_parts(path)
    return {"copied": sha256(path), "course": course, "answers": answers, "offered": None, "offer": None}


def sync(root: Path = ROOT, work: Path | None = None) -> list[str]:
    """Bring the working copy up to the release of ``root`` without losing any learner's work; one
    Chinese line per thing done (nothing when nothing changed)."""
    release, work = root / RELEASE, work or work_folder(root)
    manifest_path = work / MANIFEST
    first = not manifest_path.is_file()
    manifest = {} if first else json.loads(manifest_path.read_text(encoding="utf-8"))
    messages = []
    for rel in released_files(release):
        record = manifest.setdefault(rel.as_posix(), {})
        message = _sync_file(release / rel, work / rel, record, work.parent)
        if message:
            messages.append(message)
    work.mkdir(parents=True, exist_ok=True)
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    if first:
        return [f"第一次运行：把 {RELEASE}/ 的 {len(manifest)} 个文件复制到了 {work}，你的练习都写在那里"
                f"（git 不跟踪它，重新生成 {RELEASE}/ 或 git pull 都不会碰它）。"]
    return messages


def _sync_file(new: Path, mine: Path, record: dict, top: Path) -> str | None:
    """Sync one file; ``record`` (its manifest entry) is updated in place. Paths are shown from ``top``."""
    shown = mine.relative_to(top).as_posix()
    if not mine.exists():                           # a new section, or the learner removed their copy
        known = "copied" in record
        _copy(new, mine)
        record.update(release_record(new))
        return f"重新复制了发布版（原来的被删除或改名了）：{shown}" if known else f"新增：{shown}"
    if sha256(new) in (record.get("copied"), record.get("offered")):
        return None                                 # nothing released since the copy or the offer
    course, answers = file_parts(mine)
    written = {gid for gid, fp in answers.items() if fp != record.get("answers", {}).get(gid)}
    if sha256(mine) == record.get("copied") or (course == record.get("course") and not written):
        _copy(new, mine)                            # nothing of the learner's in it: the new release
        record.update(release_record(new))
        return f"已更新（你没有改动过它）：{shown}"
    ours, theirs = read_notebook(mine), read_notebook(new) if new.suffix == ".ipynb" else None
    merged, carried = merge(ours, theirs) if ours is not None and theirs is not None else (None, [])
    homeless = sorted(written - set(carried))
    if merged is not None and course == record.get("course") and not homeless:
        write_notebook(merged, mine)                # only answers written: the new release around them
        record.update(release_record(new))
        return f"已更新到新版，并保留了你写的 {len(written)} 个答案（按 nbgrader 单元格编号放回原处）：{shown}"
    return _offer(new, mine, merged, record, homeless, shown)


def _offer(new: Path, mine: Path, merged: dict | None, record: dict, homeless: list[str], shown: str) -> str:
    """Put the new release (with the answers that fit, if any) beside the learner's file."""
    offer = offered_name(mine)
    offer_shown = Path(shown).with_name(offer.name).as_posix()
    if offer.exists() and fingerprint(offer) != record.get("offer") and sha256(offer) != record.get("offered"):
        return f"{shown} 又有新版本（在 {RELEASE}/ 里）；旁边的 {offer.name} 你改动过，没有覆盖它。"
    if merged is None:
        _copy(new, offer)
    else:
        write_notebook(merged, offer)
    record.update(offered=sha256(new), offer=fingerprint(offer))
    answers = "，已经填进了你的答案" if merged is not None else ""
    lost = f"（这些答案在新版里没有对应的单元格，只在你的文件里：{'、'.join(homeless)}）" if homeless else ""
    return (f"{shown} 有新版本，而你在答案以外也改动过它，所以新版放在旁边的 {offer.name}{answers}{lost}；"
            f"你的 notebook 没有改动。{COMPARE.format(mine=shown, offer=offer_shown)}")


def _copy(source_path: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source_path, target)


# --- reset ----------------------------------------------------------------------------------------

def reset(root: Path, section: str, exercise: str | None = None, work: Path | None = None) -> list[str]:
    """Restore the learner's notebook of ``section`` from the release, or only the cell of ``exercise``
    (an answer cell's nbgrader id); the learner's file is first copied to ``backups/``."""
    release, work = root / RELEASE, work or work_folder(root)
    sid = pick_section(release, section)
    rel = Path(sid, f"{sid}.ipynb")
    new, mine = release / rel, work / rel
    manifest_path = work / MANIFEST
    manifest = json.loads(manifest_path.read_text(encoding="utf-8")) if manifest_path.is_file() else {}
    shown = mine.relative_to(work.parent).as_posix()
    whole = exercise is None or not mine.exists()
    restored = None if whole else restore_cell(read_notebook(mine), read_notebook(new), exercise, shown)
    messages = [f"已备份你原来的 notebook：{backup(mine, work).relative_to(work.parent).as_posix()}"] \
        if mine.exists() else []
    if whole:
        _copy(new, mine)
        manifest[rel.as_posix()] = release_record(new)
        messages.append(f"已把 {shown} 整本恢复成发布版 {RELEASE}/{rel.as_posix()}。")
    else:
        write_notebook(restored, mine)
        messages.append(f"已把 {shown} 里的练习 {exercise} 恢复成发布版，其余单元格没有改动。")
    manifest_path.parent.mkdir(parents=True, exist_ok=True)
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return messages


def backup(path: Path, work: Path) -> Path:
    """Copy ``path`` to ``work/backups/<section>/<name>-<time>.ipynb``; that copy."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    folder = work / BACKUPS / path.parent.name
    target, n = folder / f"{path.stem}-{stamp}{path.suffix}", 1
    while target.exists():
        target, n = folder / f"{path.stem}-{stamp}-{n}{path.suffix}", n + 1
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(path, target)
    return target


def restore_cell(mine: dict | None, release: dict, exercise: str, shown: str) -> dict:
    """``mine`` with the release's cell of ``exercise`` in place of its own (put back where the release
    has it, if the learner deleted it)."""
    ids = [answer_id(c) for c in release["cells"]]
    if exercise not in ids:
        raise WorkingCopyError(f"这一节没有叫 {exercise} 的练习（可选：{'、'.join(i for i in ids if i)}）")
    if mine is None:
        raise WorkingCopyError(f"{shown} 读不出来（不是有效的 notebook）：请整本恢复，不要写练习名。")
    at = ids.index(exercise)
    restored, cell = copy.deepcopy(mine), copy.deepcopy(release["cells"][at])
    own = [grade_id(c) for c in restored["cells"]]
    if exercise in own:
        restored["cells"][own.index(exercise)] = cell
        return restored
    # deleted: put it back before the next nbgrader cell of the release still there (its check, usually)
    later = [grade_id(c) for c in release["cells"][at + 1:]]
    restored["cells"].insert(next((own.index(i) for i in later if i and i in own), len(own)), cell)
    return restored


if __name__ == "__main__":
    for line in sync():
        print(line)
