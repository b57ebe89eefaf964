"""The frames a controller and a remote agent exchange over the agent's stdin/stdout.

A frame is a fixed header, then a JSON payload:

    magic b"PGSW" | protocol version (u16) | kind (u8) | request id (u32) | length (u32)

Kinds: HELLO (first, both ways: protocol, pgsweep version, uid, host name), CALL (a method
of the agent's host and its arguments), REPLY (the value, or an error with its type and
message), PING/PONG (heartbeat), BYE. stdout carries frames only; the agent logs to
stderr. A frame with another magic means something else wrote to the stream (a MOTD, a
shell rc file): the connection is refused loudly, never filtered. Payloads above
MAX_PAYLOAD are refused before they are read.
"""

from __future__ import annotations

import base64
import json
import struct
from dataclasses import dataclass
from typing import Any, BinaryIO

MAGIC = b"PGSW"
PROTOCOL = 1
HEADER = struct.Struct(">4sHBII")
MAX_PAYLOAD = 64 << 20

HELLO, CALL, REPLY, PING, PONG, BYE = 1, 2, 3, 4, 5, 6
KINDS = {HELLO: "hello", CALL: "call", REPLY: "reply", PING: "ping", PONG: "pong", BYE: "bye"}


class WireError(Exception):
    """The stream is not pgsweep's protocol (or the other side went away)."""


@dataclass(frozen=True)
class Frame:
    kind: int
    request: int
    payload: Any


def encode(frame: Frame) -> bytes:
    body = json.dumps(frame.payload, separators=(",", ":"), default=_default).encode()
    if len(body) > MAX_PAYLOAD:
        raise WireError(f"a {KINDS[frame.kind]} frame of {len(body)} bytes is over the cap")
    return HEADER.pack(MAGIC, PROTOCOL, frame.kind, frame.request, len(body)) + body


def _default(value: object) -> Any:
    if isinstance(value, bytes):
        return {"__bytes__": base64.b64encode(value).decode()}
    if hasattr(value, "__fspath__"):
        return str(value)
    raise TypeError(f"{type(value).__name__} does not cross the wire")


def _hook(obj: dict[str, Any]) -> Any:
    if len(obj) == 1 and "__bytes__" in obj:
        return base64.b64decode(obj["__bytes__"])
    return obj


def _read_exactly(stream: BinaryIO, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = stream.read(n - got)
        if not chunk:
            raise WireError("the other side closed the stream")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(stream: BinaryIO) -> Frame:
    head = _read_exactly(stream, HEADER.size)
    magic, version, kind, request, length = HEADER.unpack(head)
    if magic != MAGIC:
        raise WireError(f"not pgsweep's protocol: the stream began {head[:16]!r} (something "
                        "else writes to it: a login banner or a shell startup file?)")  # fmt: skip
    if version != PROTOCOL:
        raise WireError(f"protocol {version}, this pgsweep speaks {PROTOCOL}")
    if kind not in KINDS or length > MAX_PAYLOAD:
        raise WireError(f"a frame of kind {kind} and {length} bytes is not one pgsweep sends")
    return Frame(kind, request, json.loads(_read_exactly(stream, length), object_hook=_hook))


def write_frame(stream: BinaryIO, frame: Frame) -> None:
    stream.write(encode(frame))
    stream.flush()
