"""A grading kernel is ready as soon as it answers (autograder/provisioner.py's GradingKernelClient):
no fixed 0.2 s of draining IOPub per submission, and the same checks before it is called ready."""
from __future__ import annotations

import asyncio
from queue import Empty

import nbformat
import pytest
from traitlets.config import Config

from autograder.config import configure
from autograder.preprocessors import ResilientExecute
from autograder.provisioner import GradingKernelClient

KERNEL_INFO_REPLY = {"msg_type": "kernel_info_reply", "content": {"protocol_version": "5.3"}}
STATUS = {"msg_type": "status", "content": {"execution_state": "idle"}}


class ScriptedChannel:
    """A channel that delivers the given messages (``Empty``: nothing that time), then nothing, each
    as the answer to the last request sent on it; counts the reads."""

    def __init__(self, *messages):
        self.messages, self.reads, self.sent, self.last_request = list(messages), 0, 0, None

    def send(self, msg) -> None:
        self.sent += 1
        self.last_request = msg["header"]["msg_id"]

    async def get_msg(self, timeout=None):  # noqa: ARG002 (the channel's signature)
        self.reads += 1
        message = self.messages.pop(0) if self.messages else Empty
        if message is Empty:
            raise Empty
        return {**message, "parent_header": {"msg_id": self.last_request} if self.last_request else {}}


class ScriptedClient(GradingKernelClient):
    """The course's client on scripted channels instead of ZeroMQ sockets."""

    shell_channel = iopub_channel = None  # plain attributes instead of jupyter_client's socket properties

    def __init__(self, shell: ScriptedChannel, iopub: ScriptedChannel, alive: bool = True):
        super().__init__()
        self.shell_channel, self.iopub_channel, self.alive = shell, iopub, alive

    async def is_alive(self) -> bool:
        return self.alive


def wait(client: ScriptedClient, timeout: float | None = None) -> None:
    asyncio.run(client.wait_for_ready(timeout=timeout))


def test_ready_once_the_kernel_answered_and_iopub_delivered_without_draining_it():
    iopub = ScriptedChannel(STATUS, STATUS, STATUS)
    wait(ScriptedClient(ScriptedChannel(KERNEL_INFO_REPLY), iopub))
    assert iopub.reads == 1, "IOPub is read once (connected), not drained until it is quiet for 0.2 s"
    assert len(iopub.messages) == 2, "the stale status messages stay for nbclient to skip"


def test_asks_again_until_iopub_is_connected():
    shell = ScriptedChannel(KERNEL_INFO_REPLY, KERNEL_INFO_REPLY)
    iopub = ScriptedChannel(Empty, STATUS)   # the first reply comes before IOPub is connected
    wait(ScriptedClient(shell, iopub))
    assert shell.sent == 2 and shell.reads == 2, "kernel_info is asked again, as jupyter_client does"
    assert iopub.reads == 2


def test_a_kernel_that_died_before_answering_is_an_error():
    with pytest.raises(RuntimeError, match="died"):
        wait(ScriptedClient(ScriptedChannel(), ScriptedChannel(), alive=False))


def test_a_kernel_that_never_answers_times_out():
    with pytest.raises(RuntimeError, match="didn't respond"):
        wait(ScriptedClient(ScriptedChannel(), ScriptedChannel()), timeout=0)


@pytest.mark.parametrize("sandbox", [True, False], ids=["sandboxed", "unsandboxed"])
def test_grading_kernel_managers_hand_out_the_ready_client(sandbox):
    config = Config()
    configure(config)
    config.SandboxProvisioner.sandbox = sandbox
    execute = ResilientExecute(config=config, kernel_name="python3")
    execute.nb = nbformat.v4.new_notebook()
    assert isinstance(execute.create_kernel_manager().client(), GradingKernelClient)
