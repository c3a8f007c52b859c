"""The daemon's ceilings: memory queued for clients that do not read (--max-queued-bytes),
connections in all and per address (--max-connections, --max-connections-per-ip), and the
open-file limit (connections and sandboxes each kept within their share)."""
import contextlib
import http.client
import json
import os
import socket
import struct
import time

import pytest
import websocket

from helpers.daemon import Daemon, serve
from helpers.wait import wait_until

pytestmark = pytest.mark.cellbox_only

MB = 1_000_000
SMALL_RECEIVE_BUFFER = ((socket.SOL_SOCKET, socket.SO_RCVBUF, 4096),)


def get(d, path="api", source=None, timeout=30):
    """(status, parsed JSON body) of one GET on a fresh connection, from `source` when given."""
    conn = http.client.HTTPConnection(d.host, d.port, timeout=timeout,
                                      source_address=(source, 0) if source else None)
    try:
        conn.request("GET", "/" + path, headers={"Authorization": f"token {d.token}"})
        response = conn.getresponse()
        body = response.read()
        return response.status, json.loads(body) if body else None
    finally:
        conn.close()


def status_or_none(d, path="api"):
    with contextlib.suppress(OSError, http.client.HTTPException):
        return get(d, path, timeout=5)[0]
    return None


def idle_sockets(d, count):
    """Connections that send nothing: each holds a slot until closed."""
    return [socket.create_connection((d.host, d.port), timeout=10) for _ in range(count)]


def close_all(sockets):
    for s in sockets:
        with contextlib.suppress(OSError):
            s.close()


def slow_websocket(d, kernel_id):
    """A client of the kernel's channels that reads nothing until told to (a tiny receive
    buffer, so what it does not read stays queued in the daemon)."""
    return websocket.create_connection(
        f"ws://{d.host}:{d.port}/api/kernels/{kernel_id}/channels",
        header=[f"Authorization: token {d.token}"], timeout=60, suppress_origin=True,
        sockopt=SMALL_RECEIVE_BUFFER)


def read_until_closed(ws, timeout=60, most_frames=100_000):
    """Read frames until the close frame; returns (code, reason, bytes of data read before)."""
    deadline = time.monotonic() + timeout
    data = 0
    for _ in range(most_frames):
        assert time.monotonic() < deadline, "the server did not close the WebSocket in time"
        try:
            opcode, frame = ws.recv_data_frame(True)
        except websocket.WebSocketConnectionClosedException:
            return None, "", data
        if opcode == websocket.ABNF.OPCODE_CLOSE:
            payload = frame.data or b""
            code = struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else None
            return code, payload[2:].decode("utf-8", "replace"), data
        data += len(frame.data or b"")
    raise AssertionError(f"no close frame within {most_frames} frames")


def dechunk(raw):
    """The body of a chunked HTTP/1.1 response (head included in raw)."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    assert b"chunked" in head.lower(), head
    body = b""
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        body += rest[:size]
        rest = rest[size + 2:]
    return head, body


# ------------------------------------------------------------------ --max-queued-bytes

def test_queue_ceiling_closes_the_biggest_slow_reader_and_others_keep_working(make_daemon):
    d = make_daemon(args=["--max-queued-bytes", "24M", "--output-limit", "64M", "--pool-size", "0"])
    c = d.client()
    kernel_id = c.create_kernel()["id"]
    slow = slow_websocket(d, kernel_id)
    fast = c.ready_ws(kernel_id)
    try:
        # 40 MB of output goes to both clients (iopub is broadcast); the slow one reads none. The
        # pauses let the one that reads keep up, so only the other queues past the ceiling.
        r = fast.execute("import time\nfor i in range(40):\n    print('x' * 1_000_000, flush=True)\n"
                         "    time.sleep(0.2)", timeout=180)
        assert r.reply["content"]["status"] == "ok"
        assert r.stdout.count("x") == 40 * MB, "the client that reads lost output"
        code, reason, unread = read_until_closed(slow)
        assert code == 1008, (code, reason)
        assert "--max-queued-bytes" in reason, reason
        assert unread < 20 * MB, f"the slow client still got {unread} bytes: it was not cut off"
        assert "pass --max-queued-bytes" in d.log_text()
        # The reader and the kernel carry on.
        assert fast.execute("print(6 * 7)").stdout == "42\n"
        with c.ws(kernel_id) as again:
            assert again.execute("print('new client')").stdout == "new client\n"
    finally:
        slow.close()
        fast.close()
        c.cleanup()


def test_queue_ceiling_ends_an_unread_ndjson_stream_with_an_error_line(make_daemon):
    d = make_daemon(args=["--max-queued-bytes", "4M", "--output-limit", "64M", "--pool-size", "0"])
    c = d.client()
    kernel_id = c.create_kernel()["id"]
    body = json.dumps({"code": "for i in range(32):\n    print('y' * 1_000_000, flush=True)"}).encode()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(*SMALL_RECEIVE_BUFFER[0])
    sock.settimeout(60)
    try:
        sock.connect((d.host, d.port))
        sock.sendall(f"POST /v1/sandboxes/{kernel_id}/execute HTTP/1.1\r\nHost: x\r\n"
                     f"Authorization: token {d.token}\r\nContent-Type: application/json\r\n"
                     f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        wait_until(lambda: "ending the response to POST" in d.log_text(), timeout=120,
                   message="the daemon ending the stream nobody reads")
        raw = b""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            more = sock.recv(1 << 20)
            if not more:
                break
            raw += more
        head, stream = dechunk(raw)
        assert head.startswith(b"HTTP/1.1 200"), head
        lines = [json.loads(line) for line in stream.decode().splitlines()]  # every line whole
        last = lines[-1]
        assert last["type"] == "error" and last["name"] == "QueueLimitExceeded", last
        assert "--max-queued-bytes" in last["value"], last
        assert sum(len(l.get("text", "")) for l in lines) < 32 * MB
        # The sandbox answers the next execution.
        r = c.post(f"v1/sandboxes/{kernel_id}/execute", json={"code": "print('still here')"}, timeout=120)
        events = [json.loads(line) for line in r.text.splitlines()]
        assert {"type": "end_of_execution"} in events
        assert any(e.get("text") == "still here\n" for e in events), events
    finally:
        sock.close()
        c.cleanup()


# ------------------------------------------------------------------ connection limits

def test_per_address_limit_is_answered_429_and_other_addresses_are_served(make_daemon):
    d = make_daemon(args=["--max-connections-per-ip", "3", "--pool-size", "0"])
    c = d.client()
    kernel_id = c.create_kernel()["id"]
    c.http.close()  # its keep-alive connection would count too
    ws = c.ready_ws(kernel_id)
    held = idle_sockets(d, 2)
    try:
        # The WebSocket and the two idle connections are this address's three.
        status, body = get(d)
        assert status == 429, body
        assert "--max-connections-per-ip 3" in body["message"], body
        assert get(d, source="127.0.0.2")[0] == 200, "another address was refused"
        assert ws.execute("print('served')").stdout == "served\n"
        close_all(held)
        wait_until(lambda: status_or_none(d) == 200, timeout=30,
                   message="a new connection once others closed")
    finally:
        close_all(held)
        ws.close()
        c.cleanup()


def test_total_limit_is_answered_503(make_daemon):
    d = make_daemon(args=["--max-connections", "3", "--max-connections-per-ip", "0", "--pool-size", "0"])
    held = idle_sockets(d, 3)
    try:
        status, body = get(d)
        assert status == 503, body
        assert "--max-connections 3" in body["message"], body
        close_all(held)
        wait_until(lambda: status_or_none(d) == 200, timeout=30,
                   message="a new connection once others closed")
    finally:
        close_all(held)


# ------------------------------------------------------------------ the open-file limit

class LowFileLimitDaemon(Daemon):
    """cellboxd started with RLIMIT_NOFILE soft = hard = `files` (prlimit execs it: same pid)."""

    def __init__(self, files, **kw):
        super().__init__(**kw)
        self.files = files

    def argv(self):
        return ["prlimit", f"--nofile={self.files}:{self.files}", "--"] + super().argv()


@pytest.fixture
def low_limit_daemon():
    # A sandbox cannot be given more open files than the daemon may have (its hard limit).
    yield from serve(LowFileLimitDaemon(200, args=["--pool-size", "0", "--open-files-limit", "64"]).start())


def open_descriptors(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_near_the_file_limit_sandboxes_are_refused_and_clients_still_served(low_limit_daemon):
    d = low_limit_daemon
    assert "open files: limit 200" in d.log_text()
    c = d.client()
    kernels, refusal = [], None
    for _ in range(30):  # 200 descriptors hold a handful of sandboxes, never 30
        r = c.post("api/kernels", json={}, timeout=60)
        if r.status_code != 201:
            refusal = r
            break
        kernels.append(r.json()["id"])
        c._kernels.append(kernels[-1])
    assert kernels, "no sandbox could start under the limit"
    assert refusal is not None, "sandboxes were never refused near the file limit"
    assert refusal.status_code == 503, refusal.text
    assert "open-file limit" in refusal.json()["message"], refusal.text
    # Contexts and commands come out of the same share, and are refused the same way (once the
    # sandbox runs: before, a command is 409 "still starting").
    wait_until(lambda: c.get(f"api/kernels/{kernels[0]}").json()["execution_state"] != "starting",
               timeout=60, message="the first sandbox to run")
    for path, body in ((f"v1/sandboxes/{kernels[0]}/contexts", {}),
                       (f"v1/sandboxes/{kernels[0]}/commands", {"cmd": "sleep 300", "background": True})):
        for _ in range(30):
            r = c.post(path, json=body, timeout=60)
            if r.status_code != 201:
                break
        assert r.status_code == 503, (path, r.status_code, r.text)
        assert "open-file limit" in r.json()["message"], r.text
    assert open_descriptors(d.pid) < 200
    # Far more connections than the daemon takes: it stays within its descriptors...
    held = []
    try:
        for _ in range(120):
            with contextlib.suppress(OSError):
                held.append(socket.create_connection((d.host, d.port), timeout=5))
        wait_until(lambda: open_descriptors(d.pid) >= 60, timeout=30,
                   message="the daemon taking connections")
        assert open_descriptors(d.pid) < 200
    finally:
        close_all(held)
    # ...and serves a new client once they are gone; the sandboxes still run.
    wait_until(lambda: status_or_none(d) == 200, timeout=30, message="a new client served")
    with c.ws(kernels[0]) as ws:
        assert ws.execute("print('alive')").stdout == "alive\n"
    # A sandbox deleted (with its contexts and commands) makes room for another, once its
    # processes are gone.
    c.delete_kernel(kernels[0])
    c._kernels.remove(kernels[0])
    def created():
        r = c.post("api/kernels", json={}, timeout=60)
        return r.json()["id"] if r.status_code == 201 else None

    c._kernels.append(wait_until(created, timeout=30, interval=0.5,
                                 message="a creation admitted after a deletion"))
    c.cleanup()
