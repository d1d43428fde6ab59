"""A check driven as the judge drives it, without a kernel: every call and every answer crosses the
protocol's codec (JSON, tensors as bytes), so what the judge would see is what the check sees."""
from __future__ import annotations

import contextlib
import io

import torch

import utils.checks as checks
from utils.checks import agent, protocol
from utils.checks.core import CheckError, LocalDriver


class EncodedDriver(LocalDriver):
    """LocalDriver whose calls and answers go through protocol.encode / protocol.decode."""

    def answer(self, op):
        op = protocol.decode(protocol.encode(op))
        return protocol.decode(protocol.encode(self.session.run(op)))


def judge_locally(exercise: str, candidate, extended: bool = False, seed: int = 0) -> str | None:
    """The code the judge's way of running ``check_<exercise>`` reports for ``candidate`` (None: passes)."""
    definition = getattr(checks, f"check_{exercise}").definition
    try:
        with torch.random.fork_rng(devices=[]), agent.quiet(), contextlib.redirect_stdout(io.StringIO()):
            EncodedDriver(exercise, candidate).run(definition, extended, seed)
    except CheckError as err:
        return err.code
    return None
