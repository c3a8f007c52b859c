"""Jupyter messages and the two WebSocket framings of /api/kernels/{id}/channels.

Written from the protocol description (shared/brief/protocols.md), independently of any
server implementation, so the tests check the daemon against the contract rather than
against its own encoder.

Legacy framing (no subprotocol):
    text frame   -> one JSON object: the message plus "channel" (server frames also carry
                    top-level "msg_id" and "msg_type")
    binary frame -> u32be nbufs; u32be offsets[nbufs]; JSON; buffers...   (offsets[0] = 4*(nbufs+1);
                    nbufs counts the JSON part too)

v1.kernel.websocket.jupyter.org (always binary, little-endian u64):
    offset_count; offsets[offset_count]; channel; header; parent_header; metadata; content; buffers...
    offset_count = 2 + number of parts (parts = header, parent_header, metadata, content, buffers),
    offsets[0] = 8*(offset_count+1), last offset = total length.
"""
import datetime
import json
import struct
import uuid

V1_PROTOCOL = "v1.kernel.websocket.jupyter.org"
PROTOCOL_VERSION = "5.3"


class FramingError(AssertionError):
    """A frame from the server does not follow the framing it should."""


def utc_now_iso():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_header(msg_type, session, username="cellbox-tests", version=PROTOCOL_VERSION, date=None):
    return {
        "msg_id": uuid.uuid4().hex,
        "session": session,
        "username": username,
        "date": date if date is not None else utc_now_iso(),
        "msg_type": msg_type,
        "version": version,
    }


def new_message(msg_type, content=None, session=None, channel="shell", parent_header=None,
                metadata=None):
    """A client->server message dict (with its channel)."""
    return {
        "header": new_header(msg_type, session or uuid.uuid4().hex),
        "parent_header": parent_header or {},
        "metadata": metadata or {},
        "content": content if content is not None else {},
        "channel": channel,
        "buffers": [],
    }


def execute_content(code, silent=False, store_history=True, user_expressions=None,
                    allow_stdin=False, stop_on_error=True):
    return {
        "code": code,
        "silent": silent,
        "store_history": store_history,
        "user_expressions": user_expressions or {},
        "allow_stdin": allow_stdin,
        "stop_on_error": stop_on_error,
    }


# ---------------------------------------------------------------- legacy framing

def legacy_encode(msg):
    """Encode a client message for the legacy framing: a text frame, or a binary frame when
    the message has buffers. Returns (payload, is_binary)."""
    buffers = [bytes(b) for b in (msg.get("buffers") or [])]
    body = dict(msg)
    body.pop("buffers", None)
    if not buffers:
        body["buffers"] = []
        return json.dumps(body), False
    parts = [json.dumps(body).encode("utf-8")] + buffers
    nbufs = len(parts)
    offsets = []
    pos = 4 * (nbufs + 1)
    for p in parts:
        offsets.append(pos)
        pos += len(p)
    head = struct.pack(">I", nbufs) + b"".join(struct.pack(">I", o) for o in offsets)
    return head + b"".join(parts), True


def legacy_decode(payload, is_binary):
    """Decode a server frame of the legacy framing into a message dict with "buffers"."""
    if not is_binary:
        if isinstance(payload, bytes):
            payload = payload.decode("utf-8")
        msg = json.loads(payload)
        if not isinstance(msg, dict):
            raise FramingError(f"legacy text frame is not a JSON object: {payload[:200]!r}")
        msg.setdefault("buffers", [])
        return msg
    data = bytes(payload)
    if len(data) < 4:
        raise FramingError("legacy binary frame shorter than its count")
    (nbufs,) = struct.unpack_from(">I", data, 0)
    if nbufs < 1 or len(data) < 4 * (nbufs + 1):
        raise FramingError(f"legacy binary frame: bad part count {nbufs}")
    offsets = list(struct.unpack_from(f">{nbufs}I", data, 4))
    if offsets[0] != 4 * (nbufs + 1):
        raise FramingError(f"legacy binary frame: offsets[0]={offsets[0]}, expected {4 * (nbufs + 1)}")
    bounds = offsets + [len(data)]
    parts = [data[bounds[i]:bounds[i + 1]] for i in range(nbufs)]
    msg = json.loads(parts[0].decode("utf-8"))
    msg["buffers"] = parts[1:]
    return msg


# ---------------------------------------------------------------- v1 framing

def v1_encode(msg):
    """Encode a client message for v1.kernel.websocket.jupyter.org (bytes)."""
    channel = msg.get("channel", "shell").encode("utf-8")
    parts = [json.dumps(msg.get(k) or {}).encode("utf-8")
             for k in ("header", "parent_header", "metadata", "content")]
    parts += [bytes(b) for b in (msg.get("buffers") or [])]
    offset_count = 2 + len(parts)
    offsets = [8 * (offset_count + 1)]
    offsets.append(offsets[-1] + len(channel))
    for p in parts:
        offsets.append(offsets[-1] + len(p))
    head = struct.pack("<Q", offset_count) + b"".join(struct.pack("<Q", o) for o in offsets)
    return head + channel + b"".join(parts)


def v1_decode(payload):
    """Decode a v1 server frame into a message dict (channel, header, parent_header, metadata,
    content, buffers, plus msg_id/msg_type copied from the header for convenience)."""
    data = bytes(payload)
    if len(data) < 8:
        raise FramingError("v1 frame shorter than its offset count")
    (offset_count,) = struct.unpack_from("<Q", data, 0)
    if offset_count < 6 or len(data) < 8 * (offset_count + 1):
        raise FramingError(f"v1 frame: bad offset_count {offset_count}")
    offsets = list(struct.unpack_from(f"<{offset_count}Q", data, 8))
    if offsets[0] != 8 * (offset_count + 1):
        raise FramingError(f"v1 frame: offsets[0]={offsets[0]}, expected {8 * (offset_count + 1)}")
    if offsets[-1] != len(data):
        raise FramingError(f"v1 frame: last offset {offsets[-1]} != frame length {len(data)}")
    if any(b < a for a, b in zip(offsets, offsets[1:])):
        raise FramingError(f"v1 frame: offsets not increasing: {offsets}")
    channel = data[offsets[0]:offsets[1]].decode("utf-8")
    parts = [data[offsets[i]:offsets[i + 1]] for i in range(1, offset_count - 1)]
    names = ("header", "parent_header", "metadata", "content")
    msg = {"channel": channel}
    for name, part in zip(names, parts[:4]):
        msg[name] = json.loads(part.decode("utf-8"))
    msg["buffers"] = parts[4:]
    msg["msg_id"] = msg["header"].get("msg_id")
    msg["msg_type"] = msg["header"].get("msg_type")
    return msg
