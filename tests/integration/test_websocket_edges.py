"""Edges of /api/kernels/{id}/channels that clients trip over: protocol errors closed with a code
*and a reason* then a half-close (never a bare TCP close), shutdown_request with restart, requests
to a dead kernel, one print in one stream message, and rich output counted in the output limit.

Malformed frames are written raw on the upgraded socket (websocket-client would refuse to build
them); the close frame the server answers with is read as bytes."""
import json
import socket
import struct
import time

import pytest
import websocket

from helpers import rawhttp
from helpers.client import WSClosed

pytestmark = pytest.mark.cellbox_only

MASK = b"\x11\x22\x33\x44"


def frame(opcode, payload=b"", fin=True, rsv=0, masked=True, length_bytes=None):
    """One client frame. `length_bytes` forces the length field: None picks the shortest form,
    b"..." is written as is after a 7-bit field of 126 or 127 (to break the rules on purpose)."""
    first = (0x80 if fin else 0) | (rsv << 4) | opcode
    if length_bytes is not None:
        head = bytes([first, (0x80 if masked else 0) | (126 if len(length_bytes) == 2 else 127)]) + length_bytes
    elif len(payload) < 126:
        head = bytes([first, (0x80 if masked else 0) | len(payload)])
    elif len(payload) < 65536:
        head = bytes([first, (0x80 if masked else 0) | 126]) + struct.pack(">H", len(payload))
    else:
        head = bytes([first, (0x80 if masked else 0) | 127]) + struct.pack(">Q", len(payload))
    if not masked:
        return head + payload
    return head + MASK + bytes(b ^ MASK[i % 4] for i, b in enumerate(payload))


def read_close(sock, timeout=30, data=b""):
    """Read server frames up to the close frame: (code, reason bytes), then whether the server
    half-closed (end of file follows the close frame without the client closing). `data`: bytes
    of the stream already read."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        frame = rawhttp.split_server_frame(data)
        while frame is not None:
            opcode, payload, data = frame
            if opcode == 0x8:
                code = struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else None
                rest = data
                try:
                    while True:
                        more = sock.recv(4096)
                        if not more:
                            return code, payload[2:], True
                        rest += more
                except (socket.timeout, ConnectionResetError):
                    return code, payload[2:], False
            frame = rawhttp.split_server_frame(data)
        try:
            more = sock.recv(65536)
        except ConnectionResetError:
            more = b""
        if not more:
            raise AssertionError(f"the server closed the TCP connection without a close frame "
                                 f"(after {data[:40]!r})")
        data += more
    raise AssertionError("no close frame in time")


@pytest.fixture
def raw_ws(cb, kernel):
    """A legacy connection to `kernel`, kernel ready; yields its raw socket."""
    conn = cb.ready_ws(kernel["id"])
    yield conn.ws.sock
    conn.close()


BAD_FRAMES = {
    "64-bit length with the top bit set": frame(0x1, length_bytes=struct.pack(">Q", 1 << 63)),
    "64-bit length for a short payload": frame(0x1, b"{}", length_bytes=struct.pack(">Q", 2)),
    "16-bit length for a short payload": frame(0x1, b"{}", length_bytes=struct.pack(">H", 2)),
    "ping over 125 bytes": frame(0x9, b"p" * 126),
    "fragmented ping": frame(0x9, b"ping", fin=False),
    "unmasked client frame": frame(0x1, b"{}", masked=False),
    "reserved bit set": frame(0x1, b"{}", rsv=4),
    "unknown opcode": frame(0x3, b"{}"),
    "continuation with nothing to continue": frame(0x0, b"{}"),
    "close with an invalid code": frame(0x8, struct.pack(">H", 1005)),
}


@pytest.mark.parametrize("name", list(BAD_FRAMES))
def test_protocol_error_gets_1002_with_a_reason_then_half_close(cb, kernel, raw_ws, name):
    raw_ws.sendall(BAD_FRAMES[name])
    code, reason, half_closed = read_close(raw_ws)
    assert code == 1002, (name, code, reason)
    assert reason and len(reason) <= 123, (name, reason)
    reason.decode("utf-8")
    assert half_closed, f"{name}: no end of file after the close frame"
    # The kernel is untouched: a new connection runs code on it.
    with cb.ready_ws(kernel["id"]) as again:
        assert again.execute("print(6 * 7)").stdout == "42\n"


def test_invalid_utf8_text_gets_1007_with_a_reason(cb, kernel, raw_ws):
    raw_ws.sendall(frame(0x1, b'{"a": "\xff"}'))
    code, reason, half_closed = read_close(raw_ws)
    assert code == 1007 and b"UTF-8" in reason and half_closed


def test_message_over_the_limit_gets_1009_naming_the_limit(make_daemon):
    d = make_daemon(args=["--max-message-size", "4096"])
    c = d.client()
    k = c.create_kernel()
    with c.ready_ws(k["id"]) as conn:
        conn.ws.sock.sendall(frame(0x2, b"x" * 5000))
        code, reason, half_closed = read_close(conn.ws.sock)
    assert code == 1009 and b"4096" in reason and half_closed
    c.cleanup()


def test_close_reason_is_never_cut_inside_a_character(cb, kernel):
    """The reason for an unknown channel quotes the client's channel name: made of 3-byte
    characters, it is shortened before a character, and the reason stays valid UTF-8."""
    with cb.ready_ws(kernel["id"]) as conn:
        msg = conn.new("kernel_info_request", channel="\u20ac" * 60)
        conn.send(msg)
        with pytest.raises(WSClosed) as closed:
            conn.wait_for(lambda m: False, timeout=30)
    assert closed.value.code == 1007
    assert "\ufffd" not in closed.value.reason and "\u20ac" in closed.value.reason


def test_peer_close_is_answered_with_its_code(cb, kernel, raw_ws):
    raw_ws.sendall(frame(0x8, struct.pack(">H", 1000) + b"bye"))
    code, reason, half_closed = read_close(raw_ws)
    assert code == 1000 and half_closed


# ------------------------------------------------------------------ shutdown_request with restart

def _state(state):
    return lambda m: m["msg_type"] == "status" and m["content"].get("execution_state") == state


def test_shutdown_request_with_restart_restarts_the_kernel(cb, kernel):
    """As jupyter_client restarts a kernel: shutdown_reply (restart true) on control, status
    restarting, then a fresh kernel on the same connection; never dead."""
    with cb.ready_ws(kernel["id"]) as conn:
        assert conn.execute("x = 41; x += 1").reply["content"]["status"] == "ok"
        request = conn.send(conn.new("shutdown_request", {"restart": True}, channel="control"))
        reply = conn.wait_for(lambda m: m["msg_type"] == "shutdown_reply" and m["channel"] == "control",
                              what="shutdown_reply")
        assert reply["parent_header"]["msg_id"] == request["header"]["msg_id"]
        assert reply["content"] == {"status": "ok", "restart": True}
        conn.wait_for(_state("restarting"), timeout=60, what="status restarting")
        result = conn.execute("print('x' in globals())", timeout=60)
        assert result.stdout == "False\n"  # a new interpreter
        assert result.reply["content"]["execution_count"] == 1
        assert not [m for m in conn.inbox + result.messages if _state("dead")(m)]
        model = cb.kernel_model(kernel["id"])
        assert model["execution_state"] == "idle" and model["connections"] == 1


def test_shutdown_request_without_restart_leaves_the_kernel_dead(cb, kernel):
    with cb.ready_ws(kernel["id"]) as conn:
        conn.send(conn.new("shutdown_request", {"restart": False}, channel="control"))
        reply = conn.wait_for(lambda m: m["msg_type"] == "shutdown_reply" and m["channel"] == "control")
        assert reply["content"] == {"status": "ok", "restart": False}
        conn.wait_for(_state("dead"), timeout=60, what="status dead")
    assert cb.kernel_model(kernel["id"])["execution_state"] == "dead"


def test_shutdown_request_with_restart_while_a_cell_runs(cb, kernel):
    """ipykernel answers on its control thread while a cell runs, and jupyter_client kills a kernel
    that has not exited 5 s after the request. A busy cellbox kernel cannot answer: the daemon
    answers for it when it kills it, then restarts it."""
    with cb.ready_ws(kernel["id"]) as conn:
        cell = conn.send_execute("import time; time.sleep(600)")
        conn.wait_for(lambda m: m["msg_type"] == "execute_input", what="the cell running")
        request = conn.send(conn.new("shutdown_request", {"restart": True}, channel="control"))
        reply = conn.wait_for(lambda m: m["msg_type"] == "shutdown_reply" and m["channel"] == "control",
                              timeout=60, what="shutdown_reply")
        assert reply["parent_header"]["msg_id"] == request["header"]["msg_id"]
        assert reply["content"] == {"status": "ok", "restart": True}
        conn.wait_for(_state("restarting"), timeout=60, what="status restarting")
        stopped = conn.wait_for(lambda m: m["msg_type"] == "execute_reply"
                                and m["parent_header"].get("msg_id") == cell["header"]["msg_id"],
                                what="the stopped cell's reply")
        assert stopped["content"]["status"] == "error"
        assert "restarted on request" in stopped["content"]["evalue"]
        assert conn.execute("print('x' in globals())", timeout=60).stdout == "False\n"


def test_shutdown_request_while_a_cell_runs_ends_the_cell_and_the_kernel(cb, kernel):
    with cb.ready_ws(kernel["id"]) as conn:
        cell = conn.send_execute("import time; time.sleep(600)")
        conn.wait_for(lambda m: m["msg_type"] == "execute_input", what="the cell running")
        conn.send(conn.new("shutdown_request", {"restart": False}, channel="control"))
        result = conn.collect(cell, timeout=60)
    assert result.statuses[-1] == "dead"
    assert "shut down on request" in result.reply["content"]["evalue"]
    model = cb.kernel_model(kernel["id"])
    assert model["execution_state"] == "dead"


# ------------------------------------------------------------------ a request to a dead kernel

def test_execute_on_a_dead_kernel_ends_with_busy_error_reply_idle(cb, kernel):
    """What ipykernel's clients wait for: busy, the error, the execute_reply (status error, the
    death reason and what to do), idle; all with the request as parent."""
    with cb.ready_ws(kernel["id"]) as conn:
        conn.send(conn.new("shutdown_request", {"restart": False}, channel="control"))
        conn.wait_for(_state("dead"), timeout=60, what="status dead")
        result = conn.execute("print(1)", timeout=30)
    assert result.statuses == ["busy", "idle"]
    types = result.types
    assert types.index("error") < types.index("execute_reply") < len(types) - 1
    assert types[0] == "status" and types[-1] == "status"
    reply = result.reply["content"]
    assert reply["status"] == "error" and reply["ename"] == "DeadKernelError"
    assert "shut down on request" in reply["evalue"] and "restart the kernel" in reply["evalue"]
    assert result.first("error")["content"]["evalue"] == reply["evalue"]


# ------------------------------------------------------------------ one print, one stream message

@pytest.mark.parametrize("code, expected", [
    ("print('x' * 200_000)", "x" * 200_000 + "\n"),
    ("print('y' * 70_000)", "y" * 70_000 + "\n"),
    ("print('\u00e9' * 100_000)", "\u00e9" * 100_000 + "\n"),  # 200 KB of 2-byte characters
    ("import sys; sys.stdout.write('z' * 300_000)", "z" * 300_000),  # no newline at all
], ids=["200KB", "70KB-line", "200KB-utf8", "300KB-no-newline"])
def test_one_large_print_arrives_in_one_stream_message(kernel_ws, code, expected):
    result = kernel_ws.execute(code, timeout=60)
    streams = result.of_type("stream")
    assert [len(m["content"]["text"]) for m in streams] == [len(expected)]
    assert streams[0]["content"] == {"name": "stdout", "text": expected}


def test_a_print_larger_than_the_output_limit_is_cut_at_the_limit(make_daemon):
    d = make_daemon(args=["--output-limit", "100K"])
    c = d.client()
    k = c.create_kernel()
    with c.ready_ws(k["id"]) as conn:
        result = conn.execute("print('\u00e9' * 100_000)", timeout=60)
    c.cleanup()
    out = [m["content"]["text"] for m in result.of_type("stream") if m["content"]["name"] == "stdout"]
    assert len(out) == 1 and set(out[0]) == {"\u00e9"}
    assert 100 * 1024 - 1 <= len(out[0].encode()) <= 100 * 1024
    assert "output truncated at 100 KiB" in result.stderr


# ------------------------------------------------------------------ rich output and the output limit

DISPLAY_60K = "from IPython.display import display\ndisplay({'text/plain': 'd' * 60_000}, raw=True)\n"


@pytest.fixture
def limited_ws(make_daemon):
    d = make_daemon(args=["--output-limit", "100K"])
    c = d.client()
    k = c.create_kernel()
    conn = c.ready_ws(k["id"])
    yield conn
    conn.close()
    c.cleanup()


def _notes(result):
    return [m["content"]["text"] for m in result.of_type("stream") if m["content"]["name"] == "stderr"]


def test_display_data_counts_against_the_output_limit(limited_ws):
    """Two 60 KB displays fit no 100 KiB limit: the first is published, the second and all after
    it are dropped, with one note naming what was dropped and the limit, and the count at the end."""
    result = limited_ws.execute(DISPLAY_60K * 3 + "print('after')", timeout=60)
    shown = result.of_type("display_data")
    assert len(shown) == 1 and shown[0]["content"]["data"]["text/plain"] == "d" * 60_000
    assert "after" not in result.stdout
    notes = _notes(result)
    truncated = [n for n in notes if "output truncated at 100 KiB" in n]
    assert len(truncated) == 1 and "display_data" in truncated[0], notes
    dropped = [n for n in notes if "bytes of output were dropped" in n]
    assert len(dropped) == 1 and int(dropped[0].split()[1]) > 120_000, notes
    assert result.reply["content"]["status"] == "ok"
    assert limited_ws.execute(DISPLAY_60K).of_type("display_data"), "the next cell starts afresh"


def test_execute_result_and_update_display_data_count_too(limited_ws):
    result = limited_ws.execute("print('s' * 50_000)\n"
                                "from IPython.display import display, update_display\n"
                                "display({'text/plain': 'a'}, raw=True, display_id='one')\n"
                                "update_display({'text/plain': 'u' * 60_000}, raw=True, display_id='one')\n"
                                "'r' * 10", timeout=60)
    assert len(result.stdout) == 50_001
    assert len(result.of_type("display_data")) == 1
    assert not result.of_type("update_display_data") and not result.of_type("execute_result")
    truncated = [n for n in _notes(result) if "output truncated at 100 KiB" in n]
    assert len(truncated) == 1 and "update_display_data" in truncated[0]


def test_stream_past_the_limit_drops_later_displays(limited_ws):
    result = limited_ws.execute("print('p' * 150_000)\n" + DISPLAY_60K, timeout=60)
    assert not result.of_type("display_data")
    assert len([n for n in _notes(result) if "output truncated" in n]) == 1


def test_protocol_error_with_a_backlog_still_closes_with_whole_frames(make_daemon):
    """The client stops reading while the kernel floods output, so the server's frames back up
    (a message waits to go, its header refused), then sends a bad frame: what arrives is still
    whole frames, then one close frame with 1002 and a reason."""
    d = make_daemon(args=["--output-limit", "64M"])
    c = d.client()
    k = c.create_kernel()
    with c.ready_ws(k["id"]) as conn:
        sock = conn.ws.sock
        conn.send_execute("for i in range(24):\n    print(str(i % 10) * 1_000_000)")
        sock.settimeout(30)
        first = sock.recv(1)  # output is flowing; from here on the client reads nothing
        time.sleep(2)         # (not an assertion: lets the backlog pass the server's 1 MiB buffer)
        sock.sendall(frame(0x9, b"ping", fin=False))  # a fragmented control frame
        code, reason, half_closed = read_close(sock, timeout=120, data=first)
    c.cleanup()
    assert first == b"\x81"  # a text frame's first byte: the stream started on a frame boundary
    assert code == 1002 and reason, (code, reason)
