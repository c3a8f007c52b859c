"""Jupyter message envelopes (protocol 5.3) and their JSON encoding.

Encoding follows jupyter_client 7's Session (what ipykernel 6.17 uses): datetimes, bytes and
numbers are converted by a `default` hook; NaN/inf and other awkward values fall back to a
cleaning pass. The result is always valid UTF-8, because the daemon treats anything else as a
hostile kernel.
"""
import base64
import datetime
import itertools
import json
import math
import numbers
import os
import uuid
from collections.abc import Iterable

PROTOCOL_VERSION = "5.3"
USERNAME = "kernel"


class MalformedMessage(ValueError):
    """A frame from the daemon that is not a message we can act on."""


def timestamp(when=None):
    """ISO 8601 UTC, always with six fractional digits: 2024-01-31T12:00:00.000000Z."""
    when = when or datetime.datetime.now(datetime.timezone.utc)
    # isoformat() without its "+00:00": half the cost of strftime(), six times per cell.
    return when.astimezone(datetime.timezone.utc).isoformat(timespec="microseconds")[:-6] + "Z"


class Session:
    """One per kernel process: the `session` every header carries."""

    def __init__(self):
        self.id = str(uuid.uuid4())
        # Message ids as jupyter_client 7 makes them (session, pid, counter): unique without a
        # uuid4 (an os.urandom() system call) per message.
        self._id_prefix = f"{self.id}_{os.getpid()}_"
        self._count = itertools.count()

    def header(self, msg_type):
        return {
            "msg_id": f"{self._id_prefix}{next(self._count)}",
            "session": self.id,
            "username": USERNAME,
            "date": timestamp(),
            "msg_type": msg_type,
            "version": PROTOCOL_VERSION,
        }

    def message(self, channel, msg_type, content, parent=None, metadata=None):
        """A frame's object; `parent` is the request message (or None for no parent)."""
        return {
            "channel": channel,
            "header": self.header(msg_type),
            "parent_header": dict(parent["header"]) if parent else {},
            "metadata": metadata if metadata is not None else {},
            "content": content,
        }


def encode(message):
    try:
        text = json.dumps(message, default=_json_default, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        text = json.dumps(_json_clean(message), default=_json_default, ensure_ascii=False,
                          allow_nan=False)
    # Lone surrogates (possible in Python str) are not UTF-8: replace them rather than send
    # bytes the daemon must reject.
    return text.encode("utf-8", "replace")


def decode(body):
    """A request from the daemon as a dict with dict header/parent_header/metadata/content and
    string channel and msg_type; raises MalformedMessage saying what is wrong."""
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise MalformedMessage(f"not UTF-8 JSON ({error})") from None
    if not isinstance(message, dict):
        raise MalformedMessage("not a JSON object")
    if not isinstance(message.get("channel"), str):
        raise MalformedMessage("no string 'channel'")
    if message["channel"] == "cellbox":
        return message
    header = message.get("header")
    if not isinstance(header, dict) or not isinstance(header.get("msg_type"), str):
        raise MalformedMessage("no 'header' object with a string 'msg_type'")
    for part in ("parent_header", "metadata", "content"):
        value = message.get(part)
        if value is None:
            message[part] = {}
        elif not isinstance(value, dict):
            raise MalformedMessage(f"'{part}' is not an object")
    return message


def _json_default(obj):
    if isinstance(obj, datetime.datetime):
        if obj.tzinfo is None:
            obj = obj.replace(tzinfo=datetime.timezone.utc)
        return timestamp(obj)
    if isinstance(obj, bytes):
        return base64.b64encode(obj).decode("ascii")
    if isinstance(obj, Iterable):
        return list(obj)
    if isinstance(obj, numbers.Integral):
        return int(obj)
    if isinstance(obj, numbers.Real):
        return float(obj)
    raise TypeError(f"{obj!r} is not JSON serializable")


def _json_clean(obj):
    """jupyter_client's fallback: NaN/inf become their repr, containers become lists/dicts."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, numbers.Integral):
        return int(obj)
    if isinstance(obj, numbers.Real):
        return repr(obj) if math.isnan(obj) or math.isinf(obj) else float(obj)
    if isinstance(obj, dict):
        return {str(key): _json_clean(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [_json_clean(item) for item in obj]
    return _json_default(obj)
