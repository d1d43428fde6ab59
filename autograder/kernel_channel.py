"""What a grading kernel may send the grading process, bounded before it is decoded.

A grading kernel runs a student's code, which can reach the kernel's sockets and its session's key: any
message it sends may be a lie. jupyter_client receives a whole message (every part) before it checks
its signature or decodes it, so the bounds are set where the message arrives:

* each part (zmq frame) is at most :data:`MAX_FRAME` bytes: zmq itself refuses a larger one (the socket
  option ZMQ_MAXMSGSIZE, set on the client's zmq context before its sockets are made), drops it and
  reconnects, so that such a part is never held in the grading process;
* a message has at most :data:`MAX_BUFFERS` attached buffers and :data:`MAX_FRAME` bytes in all, checked
  before a part of it is decoded (:class:`BoundedSession`);
* a message that is badly signed, replayed, malformed or beyond these bounds is the kernel's lie
  (:class:`KernelLied`): grading gives its cell no mark, says why, and goes on in a fresh kernel
  (autograder/preprocessors.py).

zmq has no bound on the number of parts of a message it is still receiving: a message whose last part
never comes is bounded only by the cell's timeout, after which its kernel is stopped.
"""
from __future__ import annotations

import zmq
from jupyter_client.session import Session

from utils.checks.protocol import MAX_BYTES

# The judge's largest answer is 2 × MAX_BYTES characters of protocol text (utils/checks/protocol.py)
MAX_FRAME = 2 * MAX_BYTES + 1024 * 1024
MAX_BUFFERS = 64   # a widget's state has a few; nothing of a graded notebook more


class KernelLied(Exception):
    """A message from the kernel that no honest kernel sends (its cell is not graded)."""


class BoundedSession(Session):
    """jupyter_client's session, refusing a message beyond the bounds (module docstring) before it is
    decoded, and raising :class:`KernelLied` for one whose signature or form is wrong."""

    def deserialize(self, msg_list, content: bool = True, copy: bool = True) -> dict:
        if len(msg_list) > 5 + MAX_BUFFERS:
            raise KernelLied(f"一条消息有 {len(msg_list)} 个部分（最多 {5 + MAX_BUFFERS} 个）")
        size = sum(len(part) if copy else part.buffer.nbytes for part in msg_list)
        if size > MAX_FRAME:
            raise KernelLied(f"一条消息有 {size} 字节（最多 {MAX_FRAME} 字节）")
        try:
            return super().deserialize(msg_list, content, copy)
        except (ValueError, TypeError, KeyError) as err:   # "Invalid Signature", "Duplicate Signature", not JSON …
            raise KernelLied(f"一条消息的签名或格式不对（{str(err)[:80]}）") from None


def bound(context: zmq.Context) -> zmq.Context:
    """``context``, whose sockets made from now on refuse a part larger than MAX_FRAME."""
    context.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME)
    return context
