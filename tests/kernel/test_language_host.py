"""cellbox-kernel --language=javascript|typescript (src/runtime/language_host.c): Node runs the
kernel on a socketpair of its own and cellbox-kernel relays its frames to the daemon's channel
unchanged, draining fd 1/2 before each, switching channels when a new daemon adopts the kernel
and ending as Node ended. Node's side here is a stand-in (node_standin/node/kernel.js) that does
only what these tests need; test_node_kernel_through_the_host runs the real kernel.js.

Run:  /usr/bin/python3 -m pytest -q tests/kernel/test_language_host.py
"""
import array
import json
import os
import signal
import socket

import pytest

from language_kernel import SHARE_DIR, LanguageKernel, started

HERE = os.path.dirname(os.path.abspath(__file__))
STANDIN = ["--channel-fd=3", "--language=javascript", f"--share-dir={HERE}/node_standin"]

pytestmark = pytest.mark.skipif(not os.access("/usr/bin/node", os.X_OK),
                                reason="/usr/bin/node is not installed (make run installs it)")


@pytest.fixture
def kernel():
    yield from started(STANDIN)


def test_frames_are_relayed_both_ways(kernel):
    exchange = kernel.request("shell", "kernel_info_request")
    assert exchange.types() == ["status", "kernel_info_reply", "status"]
    assert exchange.reply["content"]["implementation"] == "stand-in"
    assert exchange.reply["parent_header"] == exchange.request["header"]


def test_output_comes_before_the_reply(kernel):
    big = "x" * 200000
    exchange = kernel.execute(big)
    assert exchange.reply["content"]["status"] == "ok"
    # recv drains the pipes as it reads frames: the echo must be whole once the reply is here.
    assert kernel.output["stdout"].decode() == big + "\n"


def test_cellbox_frames_reach_node(kernel):
    kernel.send_raw(b'{"channel":"cellbox","type":"environment","set":{"A":"1"}}')
    kernel.execute("after")
    kernel.wait_output("stdout", 'cellbox frame: {"channel":"cellbox","type":"environment",'
                                 '"set":{"A":"1"}}\n')


def test_the_kernel_exits_with_nodes_status():
    k = LanguageKernel(STANDIN)
    try:
        k.wait_starting()
        k.send("shell", "execute_request", {"code": "exit 5", "silent": False})
        assert k.wait_exit() == 5
    finally:
        k.close()


def test_the_kernel_dies_of_nodes_signal():
    k = LanguageKernel(STANDIN)
    try:
        k.wait_starting()
        k.send("shell", "execute_request", {"code": "kill", "silent": False})
        assert k.wait_exit() == -signal.SIGKILL
        assert "killed by signal 9" in k.stderr_text()
    finally:
        k.close()


def test_a_frame_that_breaks_the_contract_ends_the_kernel():
    k = LanguageKernel(STANDIN)
    try:
        k.wait_starting()
        k.send("shell", "execute_request", {"code": "garbage", "silent": False})
        assert k.wait_exit() == 1
        assert "not a JSON object" in k.stderr_text()
    finally:
        k.close()


def test_garbage_from_the_daemon_ends_the_kernel():
    k = LanguageKernel(STANDIN)
    try:
        k.wait_starting()
        k.send_raw(b"[1, 2]")
        assert k.wait_exit() == 0
        assert "not a JSON object" in k.stderr_text()
    finally:
        k.close()


def adopt(k):
    """What a new daemon does (docs/kernel-protocol.md "Adoption"): a new socketpair, its end sent
    over the old channel with one marker byte. Returns the old socket; k.sock is the new one."""
    ours, theirs = socket.socketpair()
    k.sock.sendmsg([b"A"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                             array.array("i", [theirs.fileno()]))])
    theirs.close()
    old, k.sock = k.sock, ours
    k._inbox = b""
    return old


@pytest.mark.parametrize("args", [STANDIN, ["--channel-fd=3", "--language=bash"]],
                         ids=["node", "bash"])
def test_adoption_switch_to_a_new_channel(args):
    k = LanguageKernel(args)
    try:
        k.wait_starting()
        k.request("shell", "kernel_info_request")
        old = adopt(k)
        first = k.recv()
        assert first["header"]["msg_type"] == "status"
        assert first["content"] == {"execution_state": "idle"} and first["parent_header"] == {}
        assert old.recv(16) == b"", "the old channel is closed after the switch"
        old.close()
        exchange = k.request("shell", "kernel_info_request")
        assert exchange.reply["content"]["status"] == "ok"
    finally:
        k.close()


def test_a_whole_request_before_the_marker_still_runs():
    k = LanguageKernel(STANDIN)
    try:
        k.wait_starting()
        request = k.message("shell", "execute_request", {"code": "sent-before", "silent": False})
        body = json.dumps(request).encode()
        k.sock.sendall(len(body).to_bytes(4, "little") + body + b"\x10\x00\x00\x00{\"half")
        old = adopt(k)
        exchange = k.collect(request)
        # As a daemon does: what still came on the old channel is read until its end of file
        # (closing it unread would make the kernel's next read fail with ECONNRESET).
        while old.recv(1 << 16):
            pass
        old.close()
        assert exchange.reply["content"]["status"] == "ok"
        k.wait_output("stdout", "sent-before\n")
        assert "dropping" in k.stderr_text()
    finally:
        k.close()


@pytest.mark.parametrize("args, why", [
    (["--language=bash"], "needs --channel-fd"),
    (["--channel-fd=99", "--language=bash"], "is not an open file descriptor"),
    (["--channel-fd=3", "--language=cobol"], "is not one this kernel runs"),
    (["--channel-fd=3", "--language=javascript"], "needs --share-dir"),
    (["--channel-fd=3", "--language=javascript", "--share-dir=/nonexistent"], "no node/kernel.js"),
])
def test_bad_command_lines_exit_2_with_a_reason(args, why):
    k = LanguageKernel(args)
    try:
        assert k.wait_exit() == 2
        assert why in k.stderr_text()
    finally:
        k.close()


@pytest.mark.skipif(not os.path.exists(os.path.join(SHARE_DIR, "node", "kernel.js")),
                    reason="the Node kernel (src/runtime/node/kernel.js) is not built")
def test_node_kernel_through_the_host():
    k = LanguageKernel(["--channel-fd=3", "--language=javascript", f"--share-dir={SHARE_DIR}"])
    try:
        k.wait_starting()
        info = k.request("shell", "kernel_info_request").reply["content"]
        assert info["language_info"]["name"] == "javascript"
        k.execute("let x = 20")
        exchange = k.execute("console.log('printed'); x * 2 + 2")
        assert exchange.one("execute_result")["content"]["data"]["text/plain"] == "42"
        assert "printed\n" in k.output["stdout"].decode()
    finally:
        k.close()


def test_adoption_while_a_bash_cell_runs():
    """The first frame on the new channel is busy with the running cell as parent; the cell's
    reply and idle then go to the new daemon."""
    k = LanguageKernel(["--channel-fd=3", "--language=bash"])
    try:
        k.wait_starting()
        request = k.send("shell", "execute_request",
                         {"code": "echo started; sleep 30; echo after", "silent": False})
        k.wait_output("stdout", "started\n")
        k.wait_process("sleep")
        old = adopt(k)
        first = k.recv()
        assert first["header"]["msg_type"] == "status"
        assert first["content"] == {"execution_state": "busy"}
        assert first["parent_header"] == request["header"]
        k.interrupt()
        exchange = k.collect(request)
        assert exchange.reply["content"]["status"] == "error"
        while old.recv(1 << 16):  # busy and execute_input, then the end of the old channel
            pass
        old.close()
    finally:
        k.close()
