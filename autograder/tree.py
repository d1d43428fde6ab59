"""Folder trees someone else wrote: walked, read and copied within bounds, iteratively, following no link.

A student controls everything in a folder she hands in: how deep it goes, how long its names are, how many
entries and bytes it holds, which entries are links, FIFOs or devices, and whether an entry is swapped
between being listed and being opened. Every walk of such a folder goes through this module:

- **bounded**: depth, name length, path length, entries, bytes of a file and of the whole tree
  (:class:`Bounds`); past one, :class:`OutOfBounds` says which, and the caller skips that tree only;
- **iterative**: an explicit stack, never one Python frame per level (a 1,200-level folder was a
  RecursionError that stopped a whole ``nbgrader collect``);
- **descriptor-relative, on both sides**: every folder is opened through its parent's descriptor
  (``O_NOFOLLOW | O_DIRECTORY``), every file read through its folder's (``O_NOFOLLOW | O_NONBLOCK``) and
  written through its new folder's (``O_CREAT | O_EXCL | O_NOFOLLOW``): no full path is ever built, so
  no name is too long for the kernel (24 folders of 200-byte names made ``os.makedirs`` fail with
  ENAMETOOLONG) and no link, swapped in or planted, is followed;
- **regular files only**: a link, FIFO, socket or device is never opened; :func:`read_tree` lists it in
  ``left_out``.

The API::

    with open_folder("/path/to/folder") as fd:          # O_NOFOLLOW: the folder itself may not be a link
        for entry in walk(fd, Bounds()):                 # (path, lstat, parent descriptor, name)
            ...
        tree = read_tree(fd, bounds)                     # regular files' bytes, folders, what was left out
    with open_folder("/dest/parent") as parent:
        write_tree(tree, parent, "copy")                 # "copy" must not exist

A grading kernel's folder (the notebook's, or its copy in a zygote's sandbox) is walked the same way:
:func:`remove_link_hazards` makes it safe for nbgrader to write and copy once the kernel has ended, and
:func:`copy_tree` copies it between the notebook and the sandbox.
"""
from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

OPEN_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
CREATE_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
CHUNK = 1 << 20

log = logging.getLogger(__name__)


class OutOfBounds(Exception):
    """A tree past one of its :class:`Bounds`; the message says which (in English, for logs)."""


@dataclass(frozen=True)
class Bounds:
    """What a tree may hold. The defaults fit a hand-in of notebooks and a few data files."""
    depth: int = 16                   # folders below the top
    name_bytes: int = 255             # one name (the kernel's NAME_MAX)
    path_bytes: int = 1024            # a path relative to the top: what a tool building full paths can take
    entries: int = 2000               # files, folders and others, all levels together
    file_bytes: int = 20_000_000      # one regular file
    total_bytes: int = 20_000_000     # all regular files together


@dataclass(frozen=True)
class Entry:
    """One thing in the tree: its path relative to the top ("a/b.txt"), its lstat, and the descriptor
    of its folder with its name there (valid until the walk moves on)."""
    path: str
    stat: os.stat_result
    parent_fd: int
    name: str

    @property
    def is_folder(self) -> bool:
        return stat.S_ISDIR(self.stat.st_mode)

    @property
    def is_regular(self) -> bool:
        return stat.S_ISREG(self.stat.st_mode)


@dataclass
class Tree:
    """What :func:`read_tree` took: regular files' bytes by relative path, folders (parents first), and the
    paths of everything that is not a regular file or folder (never opened)."""
    files: dict[str, bytes] = field(default_factory=dict)
    folders: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)


@contextlib.contextmanager
def open_folder(path: str | os.PathLike, dir_fd: int | None = None) -> Iterator[int]:
    """A descriptor of the folder ``path`` (relative to ``dir_fd`` if given), which must not be a link."""
    fd = os.open(path, OPEN_FOLDER, dir_fd=dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def _listing(fd: int, bounds: Bounds, seen: int) -> list[tuple[str, os.stat_result]]:
    """The folder's entries with their lstat, stopping as soon as the tree holds too many."""
    found = []
    with os.scandir(fd) as entries:
        for entry in entries:
            if seen + len(found) >= bounds.entries:
                raise OutOfBounds(f"more than {bounds.entries} entries")
            found.append((entry.name, entry.stat(follow_symlinks=False)))
    found.sort(reverse=True)   # popped from the end: in name order
    return found


def _check_name(path: str, name: str, bounds: Bounds) -> None:
    if len(os.fsencode(name)) > bounds.name_bytes:
        raise OutOfBounds(f"a name longer than {bounds.name_bytes} bytes")
    if len(os.fsencode(path)) > bounds.path_bytes:
        raise OutOfBounds(f"a path longer than {bounds.path_bytes} bytes")


def walk(top_fd: int, bounds: Bounds) -> Iterator[Entry]:
    """Everything under the folder ``top_fd``, depth first in name order, within ``bounds`` (else
    :class:`OutOfBounds` when the walk reaches what is past them); no link followed, one descriptor open
    per level of the current path (at most ``bounds.depth`` + 1)."""
    stack = [(os.dup(top_fd), "", 0, _listing(top_fd, bounds, 0))]
    seen = 0
    try:
        while stack:
            fd, prefix, depth, pending = stack[-1]
            if not pending:
                os.close(fd)
                stack.pop()
                continue
            name, st = pending.pop()
            seen += 1
            path = prefix + name
            _check_name(path, name, bounds)
            yield Entry(path, st, fd, name)
            if stat.S_ISDIR(st.st_mode):
                if depth + 1 > bounds.depth:
                    raise OutOfBounds(f"folders deeper than {bounds.depth} levels")
                sub = os.open(name, OPEN_FOLDER, dir_fd=fd)
                try:
                    listing = _listing(sub, bounds, seen)
                except BaseException:
                    os.close(sub)
                    raise
                stack.append((sub, path + "/", depth + 1, listing))
    finally:
        for fd, *_ in stack:
            os.close(fd)


def read_regular(parent_fd: int, name: str, limit: int) -> bytes | None:
    """The bytes of the regular file ``name`` in ``parent_fd``; None when it is not a regular file once
    opened (swapped since it was listed); :class:`OutOfBounds` past ``limit`` bytes."""
    fd = os.open(name, OPEN_FILE, dir_fd=parent_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, size = [], 0
        while chunk := os.read(fd, CHUNK):
            size += len(chunk)
            if size > limit:
                raise OutOfBounds(f"a file over {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_tree(top_fd: int, bounds: Bounds, skip: Callable[[str], bool] | None = None) -> Tree:
    """The regular files and folders under ``top_fd`` read whole (within ``bounds``), except the paths
    ``skip`` names (what a skipped folder holds still counts towards the bounds)."""
    tree, total = Tree(), 0
    for entry in walk(top_fd, bounds):
        if skip is not None and skip(entry.path):
            continue
        if entry.is_folder:
            tree.folders.append(entry.path)
            continue
        data = read_regular(entry.parent_fd, entry.name, bounds.file_bytes) if entry.is_regular else None
        if data is None:
            tree.left_out.append(entry.path)
            continue
        total += len(data)
        if total > bounds.total_bytes:
            raise OutOfBounds(f"over {bounds.total_bytes} bytes in all")
        tree.files[entry.path] = data
    return tree


def write_tree(tree: Tree, parent_fd: int, name: str, mode: int = 0o700) -> None:
    """``tree`` written as the new folder ``name`` in ``parent_fd`` (which must not exist), every folder
    made and every file created through its own folder's descriptor (so no path length limit applies and
    nothing that appears meanwhile is followed)."""
    os.mkdir(name, mode, dir_fd=parent_fd)
    with open_folder(name, parent_fd) as top:
        for folder in tree.folders:
            with _parent(top, folder) as (fd, leaf):
                os.mkdir(leaf, mode, dir_fd=fd)
        for path, data in tree.files.items():
            with _parent(top, path) as (fd, leaf):
                out = os.open(leaf, CREATE_FILE, mode & 0o666, dir_fd=fd)
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(out, view):]
                finally:
                    os.close(out)


@contextlib.contextmanager
def _parent(top: int, path: str) -> Iterator[tuple[int, str]]:
    """(descriptor of the folder holding ``path`` under ``top``, its last name), opened level by level."""
    *folders, leaf = path.split("/")
    fd = os.dup(top)
    try:
        for folder in folders:
            sub = os.open(folder, OPEN_FOLDER, dir_fd=fd)
            os.close(fd)
            fd = sub
        yield fd, leaf
    finally:
        os.close(fd)


# --- a grading kernel's folder: what the kernel left, made safe for the grader, and copied ---------------

# A grading kernel writes its notebook's folder as it likes; walking it is bounded only against a runaway
# (one descriptor is open per level: the depth stays well below the usual 1024 descriptors of a process).
KERNEL_FOLDER = Bounds(depth=512, path_bytes=1 << 16, entries=1_000_000)


def unlock(entry: Entry) -> None:
    """Give the folder ``entry`` its owner's permissions back where they are missing (a kernel took them
    off), so that the walk can go on into it. Call it before the walk resumes: it opens the folder then."""
    if entry.is_folder and not os.access(entry.name, os.R_OK | os.X_OK, dir_fd=entry.parent_fd):
        os.chmod(entry.name, stat.S_IMODE(entry.stat.st_mode) | stat.S_IRWXU, dir_fd=entry.parent_fd)


def remove_link_hazards(folder: str) -> list[str]:
    """Remove from ``folder``'s tree every symbolic link, FIFO, socket and device file and give each
    regular file with more than one hard link a copy of its own; the paths changed (relative to
    ``folder``). :class:`OutOfBounds` past :data:`KERNEL_FOLDER`: then nothing may write there.

    A kernel works in its notebook's folder, and nbgrader then writes the graded notebook there and
    copies the folder's files to autograded/ and feedback/, following links: a link (or a hard link)
    a kernel made would let that write or copy reach a file anywhere the grader can, and a FIFO would
    stop it."""
    changed: list[str] = []
    with open_folder(folder) as top:
        for entry in walk(top, KERNEL_FOLDER):
            if entry.is_folder:
                unlock(entry)
            elif not entry.is_regular:
                os.unlink(entry.name, dir_fd=entry.parent_fd)
                changed.append(entry.path)
            elif os.stat(entry.name, dir_fd=entry.parent_fd, follow_symlinks=False).st_nlink > 1:   # as of now
                copy_file(entry.name, entry.parent_fd, entry.parent_fd)   # a new file, renamed over the shared one
                changed.append(entry.path)
    return changed


def copy_tree(source: str, target: str) -> list[str]:
    """Copy the folders and the new or changed regular files of ``source`` into ``target`` (keeping modes
    and times); the paths it left out (sorted): links, FIFOs, sockets and devices, what a non-folder or a
    link in ``target`` stands in the way of, and "." when it could not go on (past :data:`KERNEL_FOLDER`,
    or either folder not one). Either side may be a kernel's work: each file is written anew under a name
    of its own and renamed over its destination, so it never writes into a file that is there."""
    left_out: list[str] = []
    blocked: tuple[str, ...] = ()   # the folders left out: nothing in them is tried
    try:
        with open_folder(source) as src, open_folder(target) as dst:
            for entry in walk(src, KERNEL_FOLDER):
                if entry.path.startswith(blocked):
                    continue
                try:
                    _copy_entry(entry, dst, left_out)
                except OSError:
                    left_out.append(entry.path)
                    blocked += (entry.path + "/",) if entry.is_folder else ()
    except (OSError, OutOfBounds):
        left_out.append(".")
    if left_out:
        log.warning("not copied from %s to %s (only regular files and folders are, never through a link): %s",
                    source, target, ", ".join(sorted(left_out)))
    return sorted(left_out)


def _copy_entry(entry: Entry, dst: int, left_out: list[str]) -> None:
    if not (entry.is_folder or entry.is_regular):
        left_out.append(entry.path)
        return
    with _parent(dst, entry.path) as (folder, name):
        if entry.is_folder:
            unlock(entry)
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, stat.S_IMODE(entry.stat.st_mode) | stat.S_IRWXU, dir_fd=folder)
            os.close(os.open(name, OPEN_FOLDER, dir_fd=folder))   # a folder, not a link to one
        elif _differs(entry.stat, name, folder):
            copy_file(entry.name, entry.parent_fd, folder, name)


def _differs(source: os.stat_result, name: str, folder: int) -> bool:
    try:
        target = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return True
    return not stat.S_ISREG(target.st_mode) or (target.st_size, target.st_mtime_ns) != (source.st_size,
                                                                                      source.st_mtime_ns)


def copy_file(name: str, src: int, dst: int, as_name: str | None = None) -> None:
    """The regular file ``name`` of folder ``src`` written as a new file into folder ``dst`` and renamed
    into place as ``as_name`` (default: ``name``)."""
    partial = f".copying-{secrets.token_hex(8)}"
    with os.fdopen(os.open(name, OPEN_FILE, dir_fd=src), "rb") as reader:
        info = os.fstat(reader.fileno())
        if not stat.S_ISREG(info.st_mode):  # swapped since it was listed
            raise OSError(f"{name} is no regular file")
        with os.fdopen(os.open(partial, CREATE_FILE, 0o600, dir_fd=dst), "wb") as writer:
            shutil.copyfileobj(reader, writer)
            os.fchmod(writer.fileno(), stat.S_IMODE(info.st_mode))
            os.utime(writer.fileno(), ns=(info.st_atime_ns, info.st_mtime_ns))
    try:
        os.rename(partial, as_name or name, src_dir_fd=dst, dst_dir_fd=dst)
    except OSError:
        os.unlink(partial, dir_fd=dst)
        raise
