"""Hand-ins taken out of the students' reach the moment they arrive: the class's intake service.

nbgrader's filesystem exchange leaves a hand-in in ``inbound/`` as a folder its student owns and can
still change; any time read from it (a name, ``timestamp.txt``, the kernel's change times) is one she
can shape: a write through a shared memory mapping dirtied before the deadline changes the notebook
after it without changing its ctime. So the grading side takes each hand-in when it arrives:

- the intake service (``python -m autograder.intake``, run by the Hub as the grading account; docs/
  jupyterhub.md §7) looks at ``inbound/`` every ``--interval`` seconds; a folder nbgrader's submit has
  finished (its ``submission_secret.txt`` written, the folder opened up to 0777) is copied at once into the
  store, ``<course directory>/intake/`` (0700, the grading account's), with a receipt: who owns the
  folder, **when the copy was made** (the hand-in time), what was left out, or why it was refused;
- the copy goes through :mod:`autograder.tree`: bounded, iterative, following no link, descriptor-relative;
  a hand-in past the bounds is refused with its reason (its student is named at collect), never a
  failure of the service;
- each hand-in is taken once: what the student does to her folder afterwards changes nothing graded;
- ``nbgrader collect`` (:class:`autograder.exchange.ExchangeCollect`) first takes what the service has not
  yet (at that moment: a hand-in the service missed counts from the collect), then reads only the store.

The store: ``<name>/receipt.json`` and ``<name>/files/`` (the hand-in's regular files), ``<name>`` being the
folder's name in ``inbound/``; made under a temporary name and renamed, so a reader never sees half of one.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import errno
import fcntl
import json
import os
import pwd
import secrets
import stat
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import tree

STORE = "intake"          # in the course directory
SECRET = "submission_secret.txt"   # nbgrader submit writes it last; release_feedback names feedback by it
FILES, RECEIPT = "files", "receipt.json"
# The folder or its secret not reachable yet, or gone: looked at again next time, never refused.
NOT_YET = (errno.EACCES, errno.ENOENT, errno.EPERM)


@dataclass
class Receipt:
    """What the intake recorded of one hand-in."""
    folder: str                          # its name in inbound/: <student>+<assignment>+<time>+<random>
    uid: int                             # the owner of the folder: who handed it in
    owner: str | None                    # that account's name (None: an account that no longer exists)
    received: str                        # ISO 8601 UTC: when the copy was complete (the hand-in time)
    left_out: list[str] = field(default_factory=list)   # links, FIFOs, sockets, devices: never read
    refused: str | None = None           # why it was not taken (past a bound, not a folder)

    @property
    def received_at(self) -> datetime.datetime:
        """The hand-in time, naive UTC (as nbgrader's parse_utc gives)."""
        return datetime.datetime.fromisoformat(self.received).replace(tzinfo=None)

    @property
    def assignment(self) -> str | None:
        parts = self.folder.rsplit("+", 3)
        return parts[1] if len(parts) >= 3 else None

    @property
    def claimed(self) -> str:
        """The student the folder's name claims (nbgrader's submit names it after the account)."""
        return self.folder.rsplit("+", 3)[0]


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


class Intake:
    """Takes new hand-ins from ``inbound`` into ``store`` (module docstring)."""

    def __init__(self, inbound: str | os.PathLike, store: str | os.PathLike, bounds: tree.Bounds):
        self.inbound, self.store, self.bounds = Path(inbound), Path(store), bounds

    def take_new(self) -> list[Receipt]:
        """One look at inbound/: every hand-in that is ready and not yet in the store, taken now (under a
        lock: the service and a collect never take the same one twice)."""
        self.store.mkdir(mode=0o700, exist_ok=True)
        taken = []
        with self._locked():
            stored = set(os.listdir(self.store))
            for name in sorted(os.listdir(self.inbound)):
                if name.startswith(".") or name in stored or self._unfinished(name):
                    continue
                try:
                    receipt = self.take(name)
                except OSError:   # gone between the listing and the look: nothing to take
                    continue
                if receipt is not None:
                    taken.append(receipt)
        return taken

    def _unfinished(self, name: str) -> bool:
        """A folder nbgrader's submit has not opened up yet (one lstat: most of inbound/ at most looks)."""
        try:
            st = os.lstat(self.inbound / name)
        except OSError:
            return True
        return stat.S_ISDIR(st.st_mode) and st.st_mode & 0o777 != 0o777

    @contextlib.contextmanager
    def _locked(self):
        with open(self.store / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def take(self, name: str) -> Receipt | None:
        """inbound/``name`` copied into the store with its receipt; None when it is not ready."""
        try:
            fd = os.open(self.inbound / name, tree.OPEN_FOLDER)
        except OSError as why:
            if why.errno in NOT_YET:
                return None
            uid = os.lstat(self.inbound / name).st_uid   # a link or a file in inbound/
            return self._keep(Receipt(name, uid, owner_name(uid), now(), refused=f"not a folder ({why.strerror})"))
        try:
            uid = os.fstat(fd).st_uid
            if not self._ready(fd):
                return None
            # Finished by nbgrader's submit, everything in it is readable: what is not was made so, and is
            # refused rather than read again at every look.
            copy = tree.read_tree(fd, self.bounds)
        except (tree.OutOfBounds, OSError) as why:
            reason = str(why) if isinstance(why, tree.OutOfBounds) else f"cannot be read ({why.strerror})"
            return self._keep(Receipt(name, uid, owner_name(uid), now(), refused=reason))
        finally:
            os.close(fd)
        return self._keep(Receipt(name, uid, owner_name(uid), "", left_out=copy.left_out), copy)

    @staticmethod
    def _ready(fd: int) -> bool:
        """Whether nbgrader's submit has finished: it writes the secret, makes every file 0644 and every
        folder 0755, and last opens the hand-in's folder up to 0777."""
        if os.fstat(fd).st_mode & 0o777 != 0o777:
            return False
        try:
            st = os.stat(SECRET, dir_fd=fd, follow_symlinks=False)
        except OSError as why:
            if why.errno in NOT_YET:
                return False
            raise
        return not stat.S_ISREG(st.st_mode) or st.st_size > 0   # a non-file secret: taken, and refused at collect

    def _keep(self, receipt: Receipt, copy: tree.Tree | None = None) -> Receipt:
        """The receipt (and the copy) under a temporary name, renamed into place; the hand-in time is the
        moment the copy is complete, before it is made visible."""
        scratch = f".incoming-{secrets.token_hex(8)}"
        with tree.open_folder(self.store) as store:
            os.mkdir(scratch, 0o700, dir_fd=store)
            with tree.open_folder(scratch, store) as folder:
                if copy is not None:
                    tree.write_tree(copy, folder, FILES)
                    receipt.received = now()
                fd = os.open(RECEIPT, tree.CREATE_FILE, 0o600, dir_fd=folder)
                with open(fd, "w", encoding="utf-8") as fh:
                    json.dump(asdict(receipt), fh)   # \u escapes: names need not be UTF-8
            os.rename(scratch, receipt.folder, src_dir_fd=store, dst_dir_fd=store)
        return receipt


def owner_name(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def receipts(store: str | os.PathLike) -> list[Receipt]:
    """Every hand-in in the store (taken or refused)."""
    store = Path(store)
    if not store.is_dir():
        return []
    found = []
    for name in sorted(os.listdir(store)):
        if not name.startswith("."):
            with open(store / name / RECEIPT, encoding="utf-8") as fh:
                found.append(Receipt(**json.load(fh)))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inbound", required=True, help="the exchange's <course>/inbound folder")
    parser.add_argument("--store", required=True, help=f"where hand-ins are kept: <course directory>/{STORE}")
    parser.add_argument("--max-kb", type=int, required=True, help="nbgrader's max_dir_size and max_file_size (kB)")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between looks at inbound/")
    args = parser.parse_args(argv)
    limit = 1000 * args.max_kb
    intake = Intake(args.inbound, args.store, tree.Bounds(file_bytes=limit, total_bytes=limit))
    print(f"intake: {args.inbound} -> {args.store}, every {args.interval} s", file=sys.stderr, flush=True)
    while True:
        try:
            for receipt in intake.take_new():
                print(f"intake: {receipt.folder} of {receipt.owner} at {receipt.received}"
                      + (f": refused, {receipt.refused}" if receipt.refused else ""), file=sys.stderr, flush=True)
        except OSError as why:   # the store's disk full, inbound/ gone: said, and tried again
            print(f"intake: {why}", file=sys.stderr, flush=True)
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
