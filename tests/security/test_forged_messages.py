"""Class 11: forged messages — from a WebSocket client (malformed frames, huge declared lengths,
invalid UTF-8/JSON, shapes that are not Jupyter messages) and from a compromised kernel writing
its own frames on its channel (fd 3): garbage, huge lengths, unknown channels, messages
claiming another kernel's identity. The daemon must close or kill the offender, say why, and
carry on for everyone else."""
import json
import os
import socket
import struct
import time
import uuid

import pytest
import websocket

from helpers import rawhttp, wire

pytestmark = pytest.mark.cellbox_only

DAEMON_ARGS = ["--max-message-size", "1M"]


def v1_offsets(*offsets):
    return struct.pack("<Q", len(offsets)) + b"".join(struct.pack("<Q", o) for o in offsets)


CLIENT_CASES = {
    # name: (framing, opcode, payload, expected close code)
    "v1-huge-offset-count": ("v1", "binary", struct.pack("<Q", 2 ** 63) + b"x" * 64, 1007),
    "v1-offset-count-4g": ("v1", "binary", struct.pack("<Q", 0xFFFFFFFF) + b"x" * 64, 1007),
    "v1-offsets-past-end": ("v1", "binary", v1_offsets(56, 61, 10 ** 12, 10 ** 12 + 1, 10 ** 12 + 2, 10 ** 12 + 3) + b"shell", 1007),
    "v1-offsets-decreasing": ("v1", "binary", v1_offsets(56, 61, 58, 60, 62, 63) + b"shell{}{}{}", 1007),
    "v1-truncated": ("v1", "binary", b"\x01\x02", 1007),
    "v1-text-frame": ("v1", "text", b"hello", 1007),
    "legacy-invalid-json": ("legacy", "text", b"{not json", 1007),
    "legacy-invalid-utf8": ("legacy", "text", b"\xff\xfe\xfd", 1007),
    "legacy-json-array": ("legacy", "text", b"[1, 2, 3]", 1007),
    "legacy-header-not-object": ("legacy", "text", json.dumps({"channel": "shell", "header": "x", "parent_header": {},
                                                               "metadata": {}, "content": {}}).encode(), 1007),
    "legacy-unknown-channel": ("legacy", "text", json.dumps(dict(wire.new_message(
        "execute_request", wire.execute_content("print('never')")), channel="kernel-admin")).encode(), 1007),
    # the close reason names the channel: cut at 40 bytes, it must not end mid-character
    "legacy-unknown-channel-cut-mid-character": ("legacy", "text", json.dumps(dict(wire.new_message(
        "kernel_info_request"), channel="a" + "\u00e9" * 30), ensure_ascii=False).encode(), 1007),
    "legacy-binary-huge-nbufs": ("legacy", "binary", struct.pack(">I", 0xFFFFFFFF) + b"\0" * 16, 1007),
    "legacy-over-max-message-size": ("legacy", "text", json.dumps({"x": "a" * (2 << 20)}).encode(), 1009),
}


@pytest.mark.parametrize("case", sorted(CLIENT_CASES))
def test_malformed_client_frame_closes_only_that_connection(box, hostile, case):
    framing, opcode, payload, expected = CLIENT_CASES[case]
    bystander = box.client.ready_ws(hostile.id)  # another client of the same kernel
    conn = box.client.ws(hostile.id, framing=framing)
    conn.ws.send(payload, opcode=websocket.ABNF.OPCODE_BINARY if opcode == "binary" else websocket.ABNF.OPCODE_TEXT)
    assert conn.wait_closed(timeout=20) == expected, f"{case}: close code {conn.close_code}"
    conn.close()
    # the same kernel, over the other connection, is fine
    res = bystander.execute("print('bystander ok')")
    assert res.stdout == "bystander ok\n"
    bystander.close()
    hostile.ok("pass")
    box.assert_contained()


def _raw_ws(box, kernel_id):
    sock, head, pending = rawhttp.websocket_upgrade(box.daemon.host, box.daemon.port,
                                                    f"/api/kernels/{kernel_id}/channels",
                                                    headers={"Authorization": f"token {box.daemon.token}"})
    assert head.startswith(b"HTTP/1.1 101"), head[:200]
    return sock, pending


def _read_close_code(sock, pending, timeout=20):
    data = pending
    deadline = time.monotonic() + timeout
    sock.settimeout(2)
    while time.monotonic() < deadline:
        # frames from the server are unmasked: opcode byte, length byte (+ext), payload
        frame = rawhttp.split_server_frame(data)
        while frame is not None:
            opcode, payload, data = frame
            if opcode == 0x8:
                return struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else None
            frame = rawhttp.split_server_frame(data)
        try:
            more = sock.recv(65536)
        except socket.timeout:
            continue
        except OSError:
            return "reset"
        if not more:
            return "eof"
        data += more
    return "timeout"


@pytest.mark.parametrize("declared", [2 ** 62, 2 ** 63 - 1, 64 << 20])
def test_frame_declaring_huge_length_is_refused(box, hostile, declared):
    """A WebSocket frame header announcing an enormous payload: the server must refuse it
    (1009 or 1002) without waiting for, or allocating, the payload."""
    sock, pending = _raw_ws(box, hostile.id)
    try:
        header = bytes([0x82, 0x80 | 127]) + struct.pack(">Q", declared) + os.urandom(4)
        sock.sendall(header + b"\0" * 1024)
        code = _read_close_code(sock, pending)
    finally:
        sock.close()
    assert code in (1009, 1002), f"declared length {declared}: {code}"
    hostile.ok("pass")
    box.assert_contained()


# ------------------------------------------------------------------ a compromised kernel

KERNEL_FRAMES = {
    "garbage-json": (b'{"channel": "iopub", ', "kernel died: it broke the protocol (invalid JSON"),
    "length-4g": (None, "kernel died: it broke the protocol (a frame of 4294967280 bytes exceeds"),
    "not-an-object": (b'[1, 2, 3]', "kernel died: it broke the protocol ("),
    "unknown-channel": (json.dumps({"channel": "admin", "header": {"msg_type": "status"}, "parent_header": {},
                                    "metadata": {}, "content": {}}).encode(), "kernel died: it broke the protocol ("),
    "header-not-object": (json.dumps({"channel": "iopub", "header": "x", "parent_header": {}, "metadata": {},
                                      "content": {}}).encode(), "kernel died: it broke the protocol ("),
    "invalid-utf8-in-json": (b'{"channel": "iopub", "header": {"msg_type": "stream\xff\xfe"}, "parent_header": {}, '
                             b'"metadata": {}, "content": {}}', "kernel died: it broke the protocol ("),
    # the death reason names the channel, cut at 40 bytes: it used to end mid-character, and the
    # reason (not UTF-8) could not go into the kernel's model or the cell's error
    "unknown-channel-cut-mid-character": (json.dumps({"channel": "a" + "\u00e9" * 30, "header": {"msg_type": "status"},
                                                      "parent_header": {}, "metadata": {}, "content": {}},
                                                     ensure_ascii=False).encode(),
                                          "kernel died: it broke the protocol (unknown channel 'a\u00e9"),
    # the kernel's own answers to the daemon carry a "type" instead of a Jupyter header
    "cellbox-without-type": (json.dumps({"channel": "cellbox", "fd": 3}).encode(),
                             "kernel died: it broke the protocol (a cellbox frame needs a non-empty string 'type'"),
    "nul-in-json": (b'{"channel": "iopub", "header": {"msg_type": "st\\u0000ream"}, "parent_header": {}, '
                    b'"metadata": {}, "content": {}}', "kernel died: it broke the protocol (invalid JSON"),
}


@pytest.mark.parametrize("case", sorted(KERNEL_FRAMES))
def test_kernel_forging_bad_frames_is_killed_and_reported(box, fresh, case):
    frame, reason = KERNEL_FRAMES[case]
    k = fresh()
    if frame is None:
        code = "import os, struct\nos.write(3, struct.pack('<I', 0xFFFFFFF0) + b'xxxx')\nimport time\ntime.sleep(30)\n"
    else:
        code = (f"import os, struct\nframe = {frame!r}\nos.write(3, struct.pack('<I', len(frame)) + frame)\n"
                "import time\ntime.sleep(30)\n")
    cell = k.run(code, timeout=60)
    assert cell.final_state == "dead", cell.describe()
    assert cell.ename == "KernelDied" and cell.error["evalue"].startswith(reason), cell.describe()
    model = k.model()
    assert model["execution_state"] == "dead" and model["reason"].startswith(reason), model
    k.restart()
    k.ok("print('clean again')")
    box.assert_contained()


def test_kernel_forging_messages_for_another_kernel(box, fresh):
    """A kernel writes well-formed frames that claim to be the neighbour's (its kernel id, its
    client's session, a parent from the neighbour's client): routing follows the connection,
    not the claims, so the neighbour's client never sees them."""
    k = fresh()
    nb = box.neighbour
    marker = "FORGED-" + uuid.uuid4().hex
    forged_parent = wire.new_header("execute_request", nb.ws.session)
    frames = []
    for channel, msg_type, content in (
            ("iopub", "stream", {"name": "stdout", "text": marker}),
            ("iopub", "status", {"execution_state": "dead"}),
            ("shell", "execute_reply", {"status": "ok", "execution_count": 1, "user_expressions": {},
                                        "payload": [], "marker": marker}),
            ("iopub", "error", {"ename": "KernelDied", "evalue": marker, "traceback": []})):
        header = wire.new_header(msg_type, nb.ws.session)
        header["kernel_id"] = nb.id
        frames.append({"channel": channel, "header": header, "parent_header": forged_parent,
                       "metadata": {"kernel_id": nb.id}, "content": content})
    payload = b"".join(struct.pack("<I", len(f)) + f for f in (json.dumps(x).encode() for x in frames))
    cell = k.run(f"import os\nos.write(3, {payload!r})\nprint('sent')\n")
    assert "sent" in cell.stdout, cell.describe()
    nb.ws.drain(quiet=1.0)
    leaked = [m for m in nb.ws.inbox if marker in json.dumps(m)]
    nb.ws.inbox.clear()
    assert not leaked, f"the neighbour's client received forged messages: {leaked}"
    assert nb.model()["execution_state"] == "idle"
    box.assert_contained()


def test_kernel_answering_namespace_transfers_nobody_asked_for_is_ignored(box, fresh):
    """A kernel writes the answers of a namespace transfer (docs/kernel-protocol.md) that the
    daemon never started, naming its channel and a missing fd: no transfer takes them, nothing
    of the kernel's is taken out of it, and it goes on serving."""
    k = fresh()
    frames = [{"channel": "cellbox", "type": "namespace_saved", "fd": 3, "bytes": 10,
               "report": {"carried": ["x"], "not_carried": [], "bytes": 10}},
              {"channel": "cellbox", "type": "namespace_buffer", "fd": 999},
              {"channel": "cellbox", "type": "namespace_loaded", "why": "x" * 100000},
              {"channel": "cellbox", "type": "checkpoint_ready", "report": [1, 2]}]
    payload = b"".join(struct.pack("<I", len(f)) + f for f in (json.dumps(x).encode() for x in frames))
    cell = k.run(f"import os\nos.write(3, {payload!r})\nprint('sent')\n")
    assert cell.final_state == "idle" and "sent" in cell.stdout, cell.describe()
    k.ok("print('still serving')")
    assert k.model()["execution_state"] == "idle"
    box.assert_contained()


def test_invalid_utf8_output_becomes_valid_text(box, hostile):
    """Bytes written to stdout are not trusted to be UTF-8: the stream reaches the client as
    valid text (the frame decoded as JSON) with the bad bytes replaced."""
    cell = hostile.run("import os\nos.write(1, b'ok \\xff\\xfe\\xc3 end\\n')\n")
    assert cell.final_state == "idle", cell.describe()
    assert cell.stdout.startswith("ok ") and cell.stdout.endswith(" end\n"), repr(cell.stdout)
    cell.stdout.encode("utf-8")
    box.assert_contained()
