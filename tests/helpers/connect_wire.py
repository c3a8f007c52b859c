"""Connect-RPC on envd's wire, as E2B's SDKs speak it to cellboxd (api/connect.c).

A streaming request or response is a run of envelopes: one flags byte (0x02 marks the
end-of-stream trailer), a big-endian 32-bit length, then a JSON message. envelope() frames one,
read_envelopes() takes them off a streaming response as they arrive (bounded in count), and
process_call()/process_events() drive envd's process.Process service."""
import json
import struct

import requests

from helpers.e2b import ENVD_PORT

END_OF_STREAM = 0x02


def envd_headers(daemon, sandbox_id, content_type, extra=None):
    """The headers of a Connect call into envd in `sandbox_id`, with the daemon's token."""
    sent = {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": ENVD_PORT,
            "X-Access-Token": daemon.token, "Content-Type": content_type,
            "Connect-Protocol-Version": "1"}
    sent.update(extra or {})
    return sent


def envelope(message, flags=0):
    """One envelope around `message` (bytes as they are, anything else as JSON)."""
    data = message if isinstance(message, bytes) else json.dumps(message).encode()
    return struct.pack(">BI", flags, len(data)) + data


def read_envelopes(response, stop=None, limit=1000, into=None):
    """Envelopes off a streaming response as they come: [(flags, message)], until the end frame
    (or `stop(message)` is true), appended to `into` one by one; at most `limit`."""
    raw = response.raw
    out = [] if into is None else into
    for _ in range(limit):
        head = raw.read(5)
        if len(head) < 5:
            break
        flags, length = struct.unpack(">BI", head)
        message = json.loads(raw.read(length))
        out.append((flags, message))
        if flags == END_OF_STREAM or (stop and stop(message)):
            break
    return out


def process_call(daemon, sandbox_id, method, message, streaming=False):
    """A process.Process call into a sandbox, as E2B's SDKs make it (unary, or a stream)."""
    content_type = "application/connect+json" if streaming else "application/json"
    body = envelope(message) if streaming else json.dumps(message).encode()
    return requests.post(f"{daemon.origin}/process.Process/{method}", data=body,
                         headers=envd_headers(daemon, sandbox_id, content_type),
                         timeout=60, stream=streaming)


def process_events(response, until=None, limit=1000):
    """The events of a process stream as they come, keepalives left out, until its end frame or
    `until(events)`."""
    events = []

    def take(message):
        if "keepalive" not in message["event"]:
            events.append(message["event"])
        return bool(until and until(events))

    read_envelopes(response, stop=take, limit=limit)
    return events
