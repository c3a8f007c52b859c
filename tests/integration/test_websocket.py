"""/api/kernels/{id}/channels: both framings, per-session routing, session replacement, and
what happens to bad frames."""
import json
import struct

import pytest
import websocket

from helpers import rawhttp, wire
from helpers.asserts import DATE_RE, REFERENCE, assert_header
from helpers.client import WSClosed
from helpers.snippets import release, wait_for_file
from helpers.wait import wait_until

TOP_LEVEL = {"msg_id", "msg_type", "channel", "header", "parent_header", "metadata", "content", "buffers"}


# ------------------------------------------------------------------ legacy framing

def test_legacy_frames_are_json_text_with_top_level_fields(cb, kernel):
    with cb.ws(kernel["id"]) as ws:
        assert ws.subprotocol is None
        req = ws.send(ws.new("kernel_info_request"))
        r = ws.collect(req, timeout=60)
        for m in r.messages:
            assert TOP_LEVEL <= set(m), m.keys()
            assert m["msg_id"] == m["header"]["msg_id"]
            assert m["msg_type"] == m["header"]["msg_type"]
            assert_header(m["header"])
            assert m["parent_header"]["msg_id"] == req["header"]["msg_id"]
            assert m["parent_header"]["msg_type"] == "kernel_info_request"
        assert r.reply["channel"] == "shell"
        assert r.reply["msg_type"] == "kernel_info_reply"
        assert {m["channel"] for m in r.of_type("status")} == {"iopub"}
        assert all(op == websocket.ABNF.OPCODE_TEXT for op, _ in ws.raw_frames)


def test_legacy_message_without_channel_goes_to_shell(cb, kernel):
    with cb.ws(kernel["id"]) as ws:
        msg = ws.new("kernel_info_request")
        del msg["channel"]
        ws.send_text(json.dumps(msg))
        r = ws.collect(msg, timeout=60)
        assert r.reply["channel"] == "shell"
        assert r.reply["content"]["status"] == "ok"


def test_legacy_accepts_autogen_quirks(cb, kernel):
    """buffers as a dict, a date without a time zone, version 5.0 (what AutoGen sends)."""
    with cb.ws(kernel["id"]) as ws:
        msg = ws.new("execute_request", wire.execute_content("print('quirks ok')"))
        msg["buffers"] = {}
        msg["header"]["date"] = "2024-03-12T17:51:18.123456"
        msg["header"]["version"] = "5.0"
        ws.send_text(json.dumps(msg))
        r = ws.collect(msg, timeout=60)
        assert r.reply["content"]["status"] == "ok"
        assert r.stdout == "quirks ok\n"


def test_legacy_binary_frame_from_client(cb, kernel):
    """A legacy binary frame (u32be count, u32be offsets, JSON, buffers) is accepted."""
    with cb.ws(kernel["id"]) as ws:
        msg = ws.new("kernel_info_request")
        msg["buffers"] = [b"\x00\x01\x02binary"]
        payload, is_binary = wire.legacy_encode(msg)
        assert is_binary
        ws.send_bytes(payload)
        r = ws.collect(msg, timeout=60)
        assert r.reply["content"]["status"] == "ok"


def test_server_dates_are_iso_utc(kernel_ws):
    r = kernel_ws.execute("1")
    for m in r.messages:
        assert DATE_RE.match(m["header"]["date"]), m["header"]["date"]


# ------------------------------------------------------------------ v1 framing

@pytest.mark.cellbox_only  # Jupyter Server 1.23 predates the v1 protocol
def test_v1_negotiated_when_offered(cb, kernel):
    with cb.ws(kernel["id"], framing="v1") as ws:
        assert ws.subprotocol == wire.V1_PROTOCOL
        r = ws.kernel_info(timeout=60)
        assert r.reply["channel"] == "shell"
        assert r.reply["content"]["status"] == "ok"
        assert all(op == websocket.ABNF.OPCODE_BINARY for op, _ in ws.raw_frames)
        assert {m["channel"] for m in r.of_type("status")} == {"iopub"}


@pytest.mark.cellbox_only
def test_v1_frame_layout(cb, kernel):
    """Check the raw bytes, not only that our decoder accepts them."""
    with cb.ws(kernel["id"], framing="v1") as ws:
        ws.kernel_info(timeout=60)
        for _, data in ws.raw_frames:
            (count,) = struct.unpack_from("<Q", data, 0)
            offsets = struct.unpack_from(f"<{count}Q", data, 8)
            assert offsets[0] == 8 * (count + 1)
            assert offsets[-1] == len(data)
            channel = data[offsets[0]:offsets[1]].decode()
            assert channel in ("shell", "iopub", "control", "stdin")
            header = json.loads(data[offsets[1]:offsets[2]])
            assert_header(header)


@pytest.mark.cellbox_only
def test_v1_execute_full_cycle(cb, kernel):
    with cb.ws(kernel["id"], framing="v1") as ws:
        ws.kernel_info(timeout=60)
        r = ws.execute("y = 20\nprint('v1 out')\ny + 22")
        assert r.reply["content"]["status"] == "ok"
        assert r.stdout == "v1 out\n"
        assert r.result_data()["text/plain"] == "42"
        assert [m["msg_type"] for m in r.iopub][0] == "status"


@pytest.mark.cellbox_only
def test_v1_chosen_among_several_offers(cb, kernel):
    r = rawhttp.websocket_handshake(
        cb.host, cb.port, f"/api/kernels/{kernel['id']}/channels",
        headers={"Authorization": f"token {cb.token}"}, protocols=["x-unknown", wire.V1_PROTOCOL])
    assert r.status == 101, r
    assert r.headers.get("sec-websocket-protocol") == wire.V1_PROTOCOL


def test_no_subprotocol_answered_when_none_offered(cb, kernel):
    r = rawhttp.websocket_handshake(cb.host, cb.port, f"/api/kernels/{kernel['id']}/channels",
                                    headers={"Authorization": f"token {cb.token}"})
    assert r.status == 101, r
    assert "sec-websocket-protocol" not in r.headers


@pytest.mark.cellbox_only
def test_frame_sent_with_the_upgrade_request_is_answered(cb, kernel):
    """A client's first frame that arrives with the upgrade request (read by libmicrohttpd with
    it) reaches the kernel: it used to be dropped, the connection not being attached yet."""
    msg = wire.new_message("kernel_info_request")
    frame = websocket.ABNF.create_frame(json.dumps(msg), websocket.ABNF.OPCODE_TEXT).format()
    # one write: the frame comes with the request
    sock, head_text, pending = rawhttp.websocket_upgrade(
        cb.host, cb.port, f"/api/kernels/{kernel['id']}/channels",
        headers={"Authorization": f"token {cb.token}"}, then=frame, timeout=60)
    with sock:
        assert head_text.startswith(b"HTTP/1.1 101"), head_text
        for _ in range(50):  # busy, the reply, idle: a few frames at most
            opcode, payload, pending = rawhttp.read_server_frame(sock, pending)
            assert opcode == websocket.ABNF.OPCODE_TEXT, (opcode, payload[:200])
            reply = json.loads(payload)
            if reply["msg_type"] == "kernel_info_reply":
                break
        else:
            raise AssertionError("no kernel_info_reply among 50 frames")
    assert reply["parent_header"]["msg_id"] == msg["header"]["msg_id"]
    assert reply["content"]["status"] == "ok"


@pytest.mark.cellbox_only
def test_unknown_subprotocol_falls_back_to_legacy(cb, kernel):
    r = rawhttp.websocket_handshake(cb.host, cb.port, f"/api/kernels/{kernel['id']}/channels",
                                    headers={"Authorization": f"token {cb.token}"}, protocols=["x-unknown"])
    assert r.status == 101, r
    assert r.headers.get("sec-websocket-protocol") in (None, ""), r.headers


@pytest.mark.cellbox_only
def test_legacy_and_v1_connections_side_by_side(cb, kernel):
    kid = kernel["id"]
    with cb.ready_ws(kid, session_id="legacy-s") as a, cb.ready_ws(kid, session_id="v1-s", framing="v1") as b:
        r = a.execute("print('to both')")
        seen = b.wait_for(lambda m: m["msg_type"] == "stream"
                          and m["parent_header"].get("msg_id") == r.msg_id, what="iopub stream on v1")
        assert seen["content"]["text"] == "to both\n"
        assert b.execute("3").result_data()["text/plain"] == "3"


# ------------------------------------------------------------------ routing between connections

def _barrier(ws):
    """A round trip on ws: once its reply is in, everything the server sent ws before is too."""
    ws.kernel_info()


def test_replies_only_to_the_requesting_session_iopub_to_all(cb, kernel):
    kid = kernel["id"]
    with cb.ready_ws(kid, session_id="sess-A") as a, cb.ready_ws(kid, session_id="sess-B") as b:
        r = a.execute("print('from A')\n'A'")
        assert r.reply["content"]["status"] == "ok"
        # B sees the iopub side of A's request ...
        for t in ("status", "execute_input", "stream", "execute_result"):
            b.wait_for(lambda m, t=t: m["msg_type"] == t and m["parent_header"].get("msg_id") == r.msg_id,
                       what=f"A's {t} on B")
        b.wait_for(lambda m: m["msg_type"] == "status" and m["content"]["execution_state"] == "idle"
                   and m["parent_header"].get("msg_id") == r.msg_id, what="A's idle on B")
        _barrier(b)
        # ... but never A's shell reply
        leaked = [m for _, m in b.log if m["parent_header"].get("msg_id") == r.msg_id and m["channel"] != "iopub"]
        assert not leaked, leaked
        # and the other way round
        rb = b.execute("'B'")
        _barrier(a)
        assert not [m for _, m in a.log if m["parent_header"].get("msg_id") == rb.msg_id and m["channel"] != "iopub"]


def test_replies_routed_per_connection_without_session_id(cb, kernel):
    """AutoGen connects with no session_id; two such connections must not get each other's replies."""
    kid = kernel["id"]
    with cb.ready_ws(kid) as a, cb.ready_ws(kid) as b:
        r = a.execute("'only A'")
        b.wait_for(lambda m: m["msg_type"] == "status" and m["content"]["execution_state"] == "idle"
                   and m["parent_header"].get("msg_id") == r.msg_id, what="A's idle on B")
        _barrier(b)
        assert not [m for _, m in b.log if m["parent_header"].get("msg_id") == r.msg_id and m["channel"] == "shell"]


def test_stdin_request_only_to_the_requesting_session(cb, kernel):
    kid = kernel["id"]
    with cb.ready_ws(kid, session_id="in-A") as a, cb.ready_ws(kid, session_id="in-B") as b:
        req = a.send_execute("v = input('who? ')\nprint('got', v)", allow_stdin=True)
        ask = a.wait_for(lambda m: m["msg_type"] == "input_request", what="input_request")
        assert ask["channel"] == "stdin"
        reply = a.new("input_reply", {"value": "ada"}, channel="stdin")
        reply["parent_header"] = ask["header"]
        a.send(reply)
        r = a.collect(req)
        assert "got ada" in r.stdout
        b.wait_for(lambda m: m["msg_type"] == "status" and m["content"]["execution_state"] == "idle"
                   and m["parent_header"].get("msg_id") == req["header"]["msg_id"], what="idle on B")
        _barrier(b)
        assert not [m for _, m in b.log if m["msg_type"] == "input_request"]


def test_same_session_id_replaces_first_connection(cb, kernel):
    kid = kernel["id"]
    first = cb.ready_ws(kid, session_id="dup-session")
    second = cb.ws(kid, session_id="dup-session")
    try:
        code = first.wait_closed(timeout=30)
        if not REFERENCE:
            assert code == 1000  # docs/api.md
        assert second.kernel_info(timeout=30).reply["content"]["status"] == "ok"
        wait_until(lambda: cb.kernel_model(kid)["connections"] == 1, timeout=10,
                   message="one connection after replacement")
    finally:
        first.close()
        second.close()


def test_closing_a_websocket_does_not_stop_the_kernel(cb, kernel):
    kid = kernel["id"]
    with cb.ready_ws(kid) as ws:
        ws.execute("kept = 'still here'")
    with cb.ready_ws(kid) as ws:
        assert ws.execute("kept").result_data()["text/plain"] == "'still here'"


def test_output_of_running_cell_reaches_a_later_connection(cb, daemon, kernel):
    kid = kernel["id"]
    a = cb.ready_ws(kid)
    req = a.send_execute(wait_for_file("late-go", after="print('after go')"))
    a.wait_for(lambda m: m["msg_type"] == "execute_input", what="execute_input")
    a.close()
    with cb.ws(kid) as b:
        release(daemon, kid, "late-go")
        m = b.wait_for(lambda m: m["msg_type"] == "stream" and "after go" in m["content"]["text"],
                       what="the running cell's output on the new connection")
        assert m["parent_header"]["msg_id"] == req["header"]["msg_id"]


# ------------------------------------------------------------------ bad frames

@pytest.mark.cellbox_only
@pytest.mark.parametrize("garbage", ["{not json", "", "\x00\x01", '{"header": '])
def test_garbage_json_closes_with_1007_and_kernel_survives(cb, kernel, garbage):
    kid = kernel["id"]
    with cb.ready_ws(kid, session_id="good") as good:
        good.execute("survivor = 123")
        bad = cb.ws(kid, session_id="bad")
        bad.send_text(garbage)
        assert bad.wait_closed(timeout=30) == 1007
        assert good.execute("survivor").result_data()["text/plain"] == "123"
        with cb.ready_ws(kid) as again:
            assert again.execute("survivor + 1").result_data()["text/plain"] == "124"


@pytest.mark.cellbox_only
@pytest.mark.parametrize("frame", [
    b"\x01",                                                    # shorter than the count
    struct.pack("<Q", 6) + struct.pack("<6Q", 56, 61, 63, 65, 67, 9999) + b"shell{}{}{}{}",  # offset past the end
    struct.pack("<Q", 2 ** 40),                                 # absurd count
    struct.pack("<Q", 6) + struct.pack("<6Q", 56, 61, 60, 62, 64, 66) + b"shell{}{}{}{}",  # offsets go backwards
    struct.pack("<Q", 6) + struct.pack("<6Q", 56, 61, 64, 66, 68, 70) + b"shellnot{}{}{}",  # header not JSON
])
def test_v1_garbage_closes_with_1007_and_kernel_survives(cb, kernel, frame):
    kid = kernel["id"]
    with cb.ready_ws(kid, session_id="good-v1", framing="v1") as good:
        bad = cb.ws(kid, session_id="bad-v1", framing="v1")
        bad.send_bytes(frame)
        assert bad.wait_closed(timeout=30) == 1007
        assert good.execute("2+2").result_data()["text/plain"] == "4"


@pytest.mark.cellbox_only
def test_legacy_garbage_binary_closes_with_1007(cb, kernel):
    kid = kernel["id"]
    with cb.ready_ws(kid, session_id="good-b") as good:
        bad = cb.ws(kid, session_id="bad-b")
        bad.send_bytes(struct.pack(">I", 3) + struct.pack(">3I", 16, 5000, 6000) + b"{}")
        assert bad.wait_closed(timeout=30) == 1007
        assert good.execute("5").result_data()["text/plain"] == "5"


@pytest.mark.cellbox_only
def test_message_over_max_size_closes_with_1009(make_daemon):
    d = make_daemon(args=["--max-message-size", "65536"])
    c = d.client()
    with c.kernel() as k:
        kid = k["id"]
        with c.ready_ws(kid, session_id="good") as good:
            bad = c.ws(kid, session_id="big")
            msg = bad.new("execute_request", wire.execute_content("x = '" + "a" * 100_000 + "'"))
            bad.send(msg)
            assert bad.wait_closed(timeout=30) == 1009
            assert good.execute("'fine'").result_data()["text/plain"] == "'fine'"
            # under the limit is fine
            r = good.execute("len('" + "b" * 30_000 + "')")
            assert r.result_data()["text/plain"] == "30000"


@pytest.mark.cellbox_only
def test_default_max_message_size_allows_large_messages(cb, kernel):
    """Default --max-message-size is 64 MiB: a 2 MiB cell is fine."""
    with cb.ready_ws(kernel["id"]) as ws:
        r = ws.execute("s = '" + "z" * (2 * 1024 * 1024) + "'\nlen(s)", timeout=60)
        assert r.result_data()["text/plain"] == str(2 * 1024 * 1024)


@pytest.mark.cellbox_only
@pytest.mark.parametrize("channel", ["nonsense", "iopub"])
def test_unknown_channel_closes_1007_kernel_unaffected(cb, kernel, channel):
    """docs/api.md: a message that is not a Jupyter message for a client channel (unknown
    channel; iopub is the kernel's, not the client's) closes that connection with 1007."""
    with cb.ready_ws(kernel["id"]) as good:
        bad = cb.ws(kernel["id"])
        try:
            bad.send(bad.new("kernel_info_request", channel=channel))
        except WSClosed:
            pass
        assert bad.wait_closed(timeout=30) == 1007
        assert good.execute("7").result_data()["text/plain"] == "7"


@pytest.mark.cellbox_only
@pytest.mark.parametrize("body", ['[1, 2]', '"a string"', '{"header": "not an object", "channel": "shell"}',
                                  '{"channel": "shell", "content": {}}'])
def test_json_that_is_not_a_message_closes_1007(cb, kernel, body):
    with cb.ready_ws(kernel["id"]) as good:
        bad = cb.ws(kernel["id"])
        bad.send_text(body)
        assert bad.wait_closed(timeout=30) == 1007
        assert good.execute("8").result_data()["text/plain"] == "8"


@pytest.mark.cellbox_only  # Jupyter Server 1.23 leaves it open
def test_ws_to_deleted_kernel_is_closed(cb, kernel):
    ws = cb.ready_ws(kernel["id"])
    try:
        cb.delete_kernel(kernel["id"])
        assert ws.wait_closed(timeout=30) == 1001  # docs/api.md: going away
    finally:
        ws.close()
