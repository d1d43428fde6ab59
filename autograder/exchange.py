"""nbgrader's filesystem exchange, collected without trusting anything a student wrote into it.

nbgrader's own ``ExchangeCollect`` runs as the grading account and believes the submission folder:
it follows links in it (their targets' contents land in ``submitted/``), takes the student from the
folder's name (``check_owner`` only warns), takes the hand-in time from the folder's name and its
``timestamp.txt``, and stops the whole collection at the first submission it cannot copy. This one
(docs/jupyterhub.md §7):

- a submission belongs to the account that **owns its folder** (the file system's word, not a name in
  a path); a folder named after someone else, or owned by an account that is not a student in the
  gradebook, is refused and logged;
- the hand-in time is **the kernel's**: the latest change time (ctime) of the folder and everything in
  it, which no unprivileged account can set back (``touch``/``utime`` sets the modification time only).
  ``submitted/<student>/<assignment>/timestamp.txt`` holds that time, so the gradebook and the late
  penalty use it;
- only **regular files** are read, each opened through its folder's descriptor without following a
  link and without blocking (``O_NOFOLLOW | O_NONBLOCK``): a link, FIFO, socket or device is never
  read (it is left out and logged);
- a submission is read whole before anything is written, within ``CourseDirectory.max_file_size`` and
  ``max_dir_size``; one that cannot be read, is over a limit or lacks nbgrader's ``submission_secret.txt``
  (``release_feedback`` would fail for everyone) is skipped, its student named in the log, and **the
  others are collected**.

Only collecting changes: the students' side stays nbgrader's (their environment has no ``autograder``)
and what it writes is only ever read here. The grading account's config::

    c.ExchangeFactory.collect = "autograder.exchange.ExchangeCollect"

A grading worker of ``python -m autograder.grade`` lists no exchange at all (:class:`Unlisted`).
"""
from __future__ import annotations

import datetime
import fnmatch
import os
import pwd
import stat
from dataclasses import dataclass, field

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.exchange import ExchangeError
from nbgrader.exchange.abc import ExchangeList
from nbgrader.exchange.default import collect
from nbgrader.utils import check_mode

OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
OPEN_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
WRITTEN_BY_COLLECT = "timestamp.txt"   # the student's own is replaced by the observed time
# nbgrader submit writes it; release_feedback names the feedback by it (and fails for everyone without it)
SECRET = "submission_secret.txt"


class Refused(Exception):
    """A submission this collect does not take; the message says why."""


@dataclass
class Handin:
    """One folder in inbound/: whose it is (its owner) and when it last changed (the kernel's ctime)."""
    folder: str
    student: str
    changed: datetime.datetime                          # naive UTC, as nbgrader's parse_utc gives
    files: dict[str, bytes] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)   # links, FIFOs, sockets, devices: never read


def entries(folder_fd: int, prefix: str = ""):
    """(relative path, lstat result, parent descriptor, name) of everything under ``folder_fd``, depth
    first, no link followed: a sub-folder is opened with O_NOFOLLOW through its parent's descriptor."""
    with os.scandir(folder_fd) as listing:
        found = [(entry.name, entry.stat(follow_symlinks=False)) for entry in listing]
    for name, st in found:
        yield prefix + name, st, folder_fd, name
        if stat.S_ISDIR(st.st_mode):
            sub = os.open(name, OPEN_FOLDER, dir_fd=folder_fd)
            try:
                yield from entries(sub, f"{prefix}{name}/")
            finally:
                os.close(sub)


def last_change(folder_fd: int) -> datetime.datetime:
    """The latest ctime of the folder and everything in it (naive UTC)."""
    newest = max([os.fstat(folder_fd).st_ctime_ns, *(st.st_ctime_ns for _, st, _, _ in entries(folder_fd))])
    return datetime.datetime.fromtimestamp(newest / 1e9, datetime.timezone.utc).replace(tzinfo=None)


def read_regular(parent_fd: int, name: str, limit: int) -> bytes | None:
    """The file's bytes, or None when it is not a regular file once opened (swapped since it was listed);
    Refused past ``limit`` bytes."""
    fd = os.open(name, OPEN_FILE, dir_fd=parent_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > limit:
                raise Refused(f"{name} is over max_file_size ({limit} bytes)")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


class ExchangeCollect(collect.ExchangeCollect):
    """``nbgrader collect`` (and the formgrader's Collect) over nbgrader's filesystem exchange, trusting
    only the file system's owner and change times (module docstring)."""

    def init_src(self):
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        self.inbound_path = os.path.join(self.root, self.coursedir.course_id, "inbound")
        if not os.path.isdir(self.inbound_path) or not check_mode(self.inbound_path, read=True, execute=True):
            self.fail(f"Cannot read the course's inbound folder: {self.inbound_path}")
        with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
            self.students = {student.id for student in gb.students}
            try:
                self.duedate = gb.find_assignment(self.coursedir.assignment_id).duedate
            except MissingEntry:
                self.duedate = None
        self.handins = {}
        for handin in self.chosen(self.listed()):
            try:
                self.handins[handin.folder] = self.read(handin)
            except (Refused, OSError) as why:
                self.log.error("Not collected: %s's submission %s: %s", handin.student, handin.folder, why)
        self.src_records = [{"username": h.student, "filename": h.folder, "timestamp": h.changed}
                            for h in self.handins.values()]

    def listed(self) -> list[Handin]:
        """Every folder of this assignment in inbound/ that a student of the course owns and is named after."""
        wanted = self.coursedir.student_id if self.coursedir.student_id not in ("", "*") else None
        handins = []
        for name in sorted(os.listdir(self.inbound_path)):
            parts = name.rsplit("+", 3)
            if len(parts) < 3 or parts[1] != self.coursedir.assignment_id:
                continue
            try:
                handin = self.attributed(name, claimed=parts[0])
            except (Refused, OSError) as why:
                self.log.error("Not collected: %s: %s", name, why)
                continue
            if wanted is None or handin.student == wanted:
                handins.append(handin)
        return handins

    def attributed(self, name: str, claimed: str) -> Handin:
        fd = self.open_submission(name)
        try:
            uid = os.fstat(fd).st_uid
            try:
                owner = pwd.getpwuid(uid).pw_name
            except KeyError:
                raise Refused(f"owned by uid {uid}, an account that no longer exists") from None
            if owner != claimed:
                raise Refused(f"named after {claimed} but made by {owner}: refused (a hand-in counts for "
                              "the account that made it)")
            if owner not in self.students:
                raise Refused(f"made by {owner}, who is not a student of the course")
            return Handin(name, owner, last_change(fd))
        finally:
            os.close(fd)

    def open_submission(self, name: str) -> int:
        """A descriptor of inbound/``name``, which must be a folder (a link there is refused: ELOOP)."""
        try:
            return os.open(os.path.join(self.inbound_path, name), OPEN_FOLDER)
        except OSError as why:
            raise Refused(f"not a folder that can be opened: {why.strerror}") from None

    def chosen(self, handins: list[Handin]) -> list[Handin]:
        """Each student's newest hand-in (with ``before_duedate``: their newest on time, if any)."""
        def on_time(handin: Handin) -> bool:
            return self.duedate is None or handin.changed <= self.duedate

        chosen: dict[str, Handin] = {}
        for handin in sorted(handins, key=lambda h: h.changed, reverse=True):
            current = chosen.get(handin.student)
            if current is None or (self.before_duedate and on_time(handin) and not on_time(current)):
                chosen[handin.student] = handin
        return list(chosen.values())

    def read(self, handin: Handin) -> Handin:
        """``handin`` with its regular files read whole; its time observed again after reading, so no change
        made while it was read can be older than the time recorded."""
        max_file, max_dir = 1000 * self.coursedir.max_file_size, 1000 * self.coursedir.max_dir_size
        fd = self.open_submission(handin.folder)
        try:
            total = 0
            for path, st, parent, name in entries(fd):
                if stat.S_ISDIR(st.st_mode) or self.ignored(path):
                    continue
                data = read_regular(parent, name, max_file) if stat.S_ISREG(st.st_mode) else None
                if data is None:
                    handin.left_out.append(path)
                    continue
                total += len(data)
                if total > max_dir:
                    raise Refused(f"over max_dir_size ({max_dir} bytes)")
                handin.files[path] = data
            handin.changed = last_change(fd)
        finally:
            os.close(fd)
        if SECRET not in handin.files:
            raise Refused(f"no {SECRET} (a folder not made by nbgrader submit)")
        if handin.left_out:
            self.log.warning("%s's submission %s: left out (not regular files, never read): %s",
                             handin.student, handin.folder, ", ".join(handin.left_out))
        return handin

    def ignored(self, path: str) -> bool:
        """nbgrader's ignore patterns (CourseDirectory.ignore) on any part of ``path``, and the student's own
        timestamp.txt."""
        return path == WRITTEN_BY_COLLECT or any(
            fnmatch.fnmatch(part, pattern) for part in path.split("/") for pattern in self.coursedir.ignore)

    def do_copy(self, src, dest):
        """Write what :meth:`read` took from ``src`` (never ``src`` itself) and the observed hand-in time."""
        handin = self.handins[os.path.basename(src)]
        os.makedirs(dest)
        for path, data in handin.files.items():
            target = os.path.join(dest, path)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as fh:
                fh.write(data)
        stamp = handin.changed.replace(tzinfo=datetime.timezone.utc).strftime(self.timestamp_format)
        with open(os.path.join(dest, WRITTEN_BY_COLLECT), "w", encoding="utf-8") as fh:
            fh.write(stamp)


class Unlisted(ExchangeList):
    """The exchange's listing in a grading worker (autograder/worker.py): none. nbgrader's API lists the
    exchange when it is made (for the formgrader's pages); a worker only grades, and where the exchange is
    elsewhere or absent (another machine's course, a test) the listing logged "Unwritable directory, please
    contact your instructor" as CRITICAL."""

    def start(self):
        raise ExchangeError("a grading worker lists no exchange")
