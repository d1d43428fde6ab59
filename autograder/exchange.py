"""nbgrader's filesystem exchange, collected without trusting anything a student wrote into it.

nbgrader's own ``ExchangeCollect`` runs as the grading account and believes the submission folder:
it follows links in it (their targets' contents land in ``submitted/``), takes the student from the
folder's name (``check_owner`` only warns), takes the hand-in time from the folder's name and its
``timestamp.txt``, and stops the whole collection at the first submission it cannot copy. This one
(docs/jupyterhub.md §7) collects from the grading side's own copies, made when the hand-ins arrived
(:mod:`autograder.intake`):

- a hand-in leaves the student's reach when it arrives: the intake service copies it into the course
  directory's ``intake/`` and records **the time of that copy** as the hand-in time; collect first takes
  what the service has not yet (at that moment), then reads only those copies. Nothing the student does
  to her folder in ``inbound/`` afterwards (a write through a memory mapping, a change of its times)
  changes what is graded. ``submitted/<student>/<assignment>/timestamp.txt`` holds that time, so the
  gradebook and the late penalty use it;
- a submission belongs to the account that **owns its folder** (the file system's word, not a name in
  a path); a folder named after someone else, or owned by an account that is not a student in the
  gradebook, is refused and logged;
- every walk is bounded (depth, names, entries, bytes: ``CourseDirectory.max_file_size`` and
  ``max_dir_size``), iterative, descriptor-relative on both the read and the write side and follows no
  link (:mod:`autograder.tree`); only **regular files** are taken (a link, FIFO, socket or device is left
  out and logged);
- a submission past a bound, unreadable, or without nbgrader's ``submission_secret.txt`` (``release_feedback``
  would fail for everyone) is skipped, its student named in the log, and **the others are collected**;
  a student's earlier collected copy stays when her newer hand-in is skipped.

Only collecting changes: the students' side stays nbgrader's (their environment has no ``autograder``)
and what it writes is only ever read here. The grading account's config::

    c.ExchangeFactory.collect = "autograder.exchange.ExchangeCollect"

A grading worker of ``python -m autograder.grade`` lists no exchange at all (:class:`Unlisted`).
"""
from __future__ import annotations

import datetime
import fnmatch
import os
from dataclasses import dataclass

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.exchange import ExchangeError
from nbgrader.exchange.abc import ExchangeList
from nbgrader.exchange.default import collect
from nbgrader.utils import check_mode

from . import intake, tree

WRITTEN_BY_COLLECT = "timestamp.txt"   # the student's own is replaced by the observed time


class Refused(Exception):
    """A submission this collect does not take; the message says why."""


@dataclass
class Handin:
    """One hand-in as the intake took it: whose it is (its folder's owner), when it was taken, its files."""
    folder: str
    student: str
    changed: datetime.datetime                          # naive UTC, as nbgrader's parse_utc gives
    files: tree.Tree | None = None


class ExchangeCollect(collect.ExchangeCollect):
    """``nbgrader collect`` (and the formgrader's Collect) over nbgrader's filesystem exchange, from the
    grading side's own copies of the hand-ins (module docstring)."""

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
        self.bounds = tree.Bounds(file_bytes=1000 * self.coursedir.max_file_size,
                                  total_bytes=1000 * self.coursedir.max_dir_size)
        self.store = os.path.join(self.coursedir.root, intake.STORE)
        intake.Intake(self.inbound_path, self.store, self.bounds).take_new()   # what the service has not yet
        self.handins = {}
        for handin in self.chosen(self.listed()):
            try:
                self.handins[handin.folder] = self.read(handin)
            except (Refused, tree.OutOfBounds, OSError) as why:
                self.log.error("Not collected: %s's submission %s: %s", handin.student, handin.folder, why)
        self.check_owner = False   # done above, from the intake's receipts; inbound/ is not looked at again
        self.src_records = [{"username": h.student, "filename": h.folder, "timestamp": h.changed}
                            for h in self.handins.values()]

    def listed(self) -> list[Handin]:
        """Every hand-in of this assignment in the store that a student of the course made under their own
        name; each other one logged, with its student, and left out."""
        wanted = self.coursedir.student_id if self.coursedir.student_id not in ("", "*") else None
        handins = []
        for receipt in intake.receipts(self.store):
            if receipt.assignment != self.coursedir.assignment_id:
                continue
            try:
                handin = self.attributed(receipt)
            except Refused as why:
                self.log.error("Not collected: %s's submission %s: %s", receipt.owner or f"uid {receipt.uid}",
                               receipt.folder, why)
                continue
            if wanted is None or handin.student == wanted:
                handins.append(handin)
        self.report_not_taken()
        return handins

    def attributed(self, receipt: intake.Receipt) -> Handin:
        if receipt.refused:
            raise Refused(receipt.refused)
        if receipt.owner is None:
            raise Refused(f"owned by uid {receipt.uid}, an account that no longer exists")
        if receipt.owner != receipt.claimed:
            raise Refused(f"named after {receipt.claimed} but made by {receipt.owner}: refused (a hand-in counts "
                          "for the account that made it)")
        if receipt.owner not in self.students:
            raise Refused(f"made by {receipt.owner}, who is not a student of the course")
        if receipt.left_out:
            self.log.warning("%s's submission %s: left out (not regular files, never read): %s",
                             receipt.owner, receipt.folder, ", ".join(receipt.left_out))
        return Handin(receipt.folder, receipt.owner, receipt.received_at)

    def report_not_taken(self) -> None:
        """Folders of this assignment in inbound/ that neither the service nor this collect could take: not
        finished by nbgrader's submit (autograder.intake) or not reachable by the grading account."""
        taken = set(os.listdir(self.store))
        for name in sorted(os.listdir(self.inbound_path)):
            parts = name.rsplit("+", 3)
            if name not in taken and len(parts) >= 3 and parts[1] == self.coursedir.assignment_id:
                self.log.error("Not collected: %s: not finished by nbgrader submit (no %s, or the folder not "
                               "opened up to 0777), or not reachable by the grading account", name, intake.SECRET)

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
        """``handin`` with its files read whole from the store, within the bounds, before anything is written."""
        with tree.open_folder(os.path.join(self.store, handin.folder, intake.FILES)) as fd:
            handin.files = tree.read_tree(fd, self.bounds, skip=self.ignored)
        if intake.SECRET not in handin.files.files:
            raise Refused(f"no {intake.SECRET} (a folder not made by nbgrader submit)")
        return handin

    def ignored(self, path: str) -> bool:
        """nbgrader's ignore patterns (CourseDirectory.ignore) on any part of ``path``, and the student's own
        timestamp.txt."""
        return path == WRITTEN_BY_COLLECT or any(
            fnmatch.fnmatch(part, pattern) for part in path.split("/") for pattern in self.coursedir.ignore)

    def do_copy(self, src, dest):
        """Write what :meth:`read` took (never ``src`` itself) and the hand-in time, folder by folder through
        descriptors (no path is too long)."""
        handin = self.handins[os.path.basename(src)]
        stamp = handin.changed.replace(tzinfo=datetime.timezone.utc).strftime(self.timestamp_format)
        handin.files.files[WRITTEN_BY_COLLECT] = stamp.encode()
        parent, name = os.path.split(dest)
        with tree.open_folder(parent) as fd:
            tree.write_tree(handin.files, fd, name, mode=0o755)


class Unlisted(ExchangeList):
    """The exchange's listing in a grading worker (autograder/worker.py): none. nbgrader's API lists the
    exchange when it is made (for the formgrader's pages); a worker only grades, and where the exchange is
    elsewhere or absent (another machine's course, a test) the listing logged "Unwritable directory, please
    contact your instructor" as CRITICAL."""

    def start(self):
        raise ExchangeError("a grading worker lists no exchange")
