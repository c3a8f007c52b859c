"""The Model Context Protocol at /mcp, with the official MCP SDK's client and on the wire.

- The TypeScript SDK's Client (tests/clients/node/mcp_client.mjs) over both transports: streamable
  HTTP straight to /mcp, and stdio through `cellbox mcp` (the CLI's bridge). It lists the tools
  and runs an agent's scenario; every step is checked here again.
- The HTTP endpoint itself with `requests` and raw sockets: sessions (Mcp-Session-Id, 400 without
  one, 404 for an ended one, DELETE ends it and deletes its sandbox), what it refuses (GET, bad
  JSON, batches, an unsupported MCP-Protocol-Version, no token), and a client that goes away in
  the middle of a call.
- `cellbox mcp` on its own: against the daemon, against a fake server that records the headers
  it sends, and with no daemon at all.

The npm packages come from `scripts/install-deps.sh test` (npm ci in tests/clients/node)."""
import contextlib
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import time

import pytest
import requests

from helpers.daemon import cli_binary, free_port, serving_in_thread
from helpers.wait import wait_until

pytestmark = pytest.mark.cellbox_only  # Jupyter Server has no MCP endpoint

NODE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node")
LATEST_PROTOCOL = "2025-11-25"
TIMEOUT = 60


def sandbox_ids(daemon):
    r = daemon.client().get("v1/sandboxes")
    assert r.status_code == 200, r.text
    return {s["id"] for s in r.json()}


def sandboxes_by_id(daemon):
    return {s["id"]: s for s in daemon.client().get("v1/sandboxes").json()}


class Mcp:
    """One MCP session on the HTTP endpoint, driven with plain requests."""

    def __init__(self, daemon, token=None):
        self.url = daemon.origin + "/mcp"
        self.token = daemon.token if token is None else token
        self.session_id = None
        self.next_id = 0

    def headers(self, session=True, extra=None):
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.token:
            headers["Authorization"] = f"token {self.token}"
        if session and self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        headers.update(extra or {})
        return headers

    def post(self, message, session=True, headers=None, timeout=TIMEOUT):
        data = message if isinstance(message, (bytes, str)) else json.dumps(message)
        return requests.post(self.url, data=data, headers=self.headers(session, headers), timeout=timeout)

    def initialize(self, protocol="2025-06-18"):
        r = self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                       "params": {"protocolVersion": protocol, "capabilities": {},
                                  "clientInfo": {"name": "pytest", "version": "0"}}}, session=False)
        assert r.status_code == 200, r.text
        self.session_id = r.headers.get("Mcp-Session-Id")
        assert self.session_id, r.headers
        notified = self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert notified.status_code == 202, notified.text
        return r

    def request(self, method, params=None, timeout=TIMEOUT):
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            message["params"] = params
        r = self.post(message, timeout=timeout)
        assert r.status_code == 200, f"{method}: HTTP {r.status_code} {r.text}"
        assert r.headers["Content-Type"].startswith("application/json"), r.headers
        answer = r.json()
        assert answer["id"] == self.next_id, answer
        return answer

    def tool(self, name, arguments=None, timeout=TIMEOUT):
        """A tool's result: {"content": [...], "isError": ...} plus "text", its text joined."""
        answer = self.request("tools/call", {"name": name, "arguments": arguments or {}}, timeout)
        assert "result" in answer, answer
        result = answer["result"]
        result.setdefault("isError", False)  # optional in a result: absent means false
        result["text"] = "\n".join(c["text"] for c in result["content"] if c["type"] == "text")
        return result

    def delete(self):
        return requests.delete(self.url, headers=self.headers(), timeout=TIMEOUT)


@pytest.fixture
def mcp(daemon):
    session = Mcp(daemon)
    session.initialize()
    yield session
    if session.session_id:
        session.delete()
    assert daemon.alive(), f"cellboxd died during this test; log tail:\n{daemon.log_tail()}"


# ---------------------------------------------------------------------------- the SDK's client

def run_sdk_client(daemon, transport, timeout=240):
    node = shutil.which("node")
    assert node, "node is not installed (scripts/install-deps.sh test installs it)"
    assert os.path.isdir(os.path.join(NODE_DIR, "node_modules", "@modelcontextprotocol", "sdk")), \
        "npm packages missing: run `npm ci` in tests/clients/node (scripts/install-deps.sh test)"
    assert os.access(cli_binary(), os.X_OK), f"{cli_binary()} missing: run `make build`"
    env = dict(os.environ, CELLBOX_URL=daemon.origin, CELLBOX_TOKEN=daemon.token,
               CELLBOX_CLI=cli_binary(), CELLBOX_CLIENT_DEADLINE_MS=str((timeout - 20) * 1000))
    proc = subprocess.run([node, "mcp_client.mjs", transport], cwd=NODE_DIR, env=env,
                          capture_output=True, text=True, timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    detail = f"exit {proc.returncode}\nstdout:\n{proc.stdout[-6000:]}\nstderr:\n{proc.stderr[-3000:]}"
    assert lines, f"no summary from mcp_client.mjs\n{detail}"
    return proc, json.loads(lines[-1]), detail


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_sdk_client_scenario(daemon, transport):
    before = sandbox_ids(daemon)
    proc, summary, detail = run_sdk_client(daemon, transport)
    steps = summary["steps"]
    failed = {name: step for name, step in steps.items() if not step["ok"]}
    assert not failed, f"failed steps: {json.dumps(failed, indent=1)[:6000]}\n{detail}"
    expected = ["connect", "ping", "tools", "state", "plot", "error", "run_command", "files",
                "sandboxes", "run", "unknown_tool", "close"]
    missing = [s for s in expected if s not in steps]
    assert not missing, f"steps never reported: {missing}\n{detail}"
    assert proc.returncode == 0, detail
    assert summary["transport"] == transport

    connect = steps["connect"]
    assert connect["server"]["name"] == "cellbox"
    assert connect["capabilities"]["tools"] is not None
    assert "sandbox" in connect["instructions"]
    if transport == "http":
        assert connect["session_id"]

    tools = steps["tools"]
    assert set(tools["names"]) == {"create_sandbox", "list_templates", "list_sandboxes", "run_code", "create_context", "run_command",
                                   "read_file", "write_file", "list_files", "pause_sandbox",
                                   "resume_sandbox", "delete_sandbox", "run", "update_network",
                                   "snapshot_sandbox", "restore_snapshot", "fork_sandbox",
                                   "run_code_in_fork"}
    assert tools["incomplete"] == []
    assert tools["required"]["run_code"] == ["code"]
    assert tools["required"]["run_command"] == ["cmd"]
    assert sorted(tools["required"]["write_file"]) == ["content", "path"]

    assert steps["state"]["second"].strip().endswith("3")
    plot = steps["plot"]
    assert plot["images"] == 1 and plot["mimeType"] == "image/png" and plot["png_signature"]
    assert plot["png_bytes"] > 1000
    error = steps["error"]
    assert error["isError"] and "ZeroDivisionError" in error["text"] and "Traceback" in error["text"]
    assert "\x1b[" not in error["text"], "the traceback keeps terminal colour codes"

    command = steps["run_command"]
    assert not command["passed_isError"] and "hello" in command["passed"]
    assert "/workspace" in command["passed"]
    assert command["failed_isError"] and "exit code: 3" in command["failed"]
    assert "oops" in command["failed"]

    files = steps["files"]
    assert files["read"] == "hello from mcp\nline two ✓\n"
    assert "/workspace/notes/hello.txt" in files["list"]
    assert "line two ✓" in files["from_kernel"]
    assert files["missing_isError"] and "does not exist" in files["missing"]

    boxes = steps["sandboxes"]
    assert boxes["id"] and "42" in boxes["got"] and "False" in boxes["isolated"]
    assert "paused" in boxes["paused"] and "running" in boxes["resumed"] and "43" in boxes["after"]
    assert boxes["gone_isError"] and "does not exist" in boxes["gone"]

    run = steps["run"]
    assert "exit code: 0" in run["python"] and "once 3" in run["python"]
    assert run["bash_isError"] and "exit code: 4" in run["bash"] and "shell" in run["bash"]
    assert "False" in run["fresh"]

    unknown = steps["unknown_tool"]
    assert unknown["code"] == -32602 and "no_such_tool" in unknown["message"]

    # Closing the session (DELETE /mcp; for stdio, `cellbox mcp` at the end of its stdin) deleted
    # the sandbox the session made; delete_sandbox deleted the other one.
    wait_until(lambda: sandbox_ids(daemon) == before, timeout=20,
               message="the MCP session's sandboxes to be deleted")
    if transport == "stdio":
        assert summary["bridge_stderr"] == "", summary["bridge_stderr"]
    assert daemon.alive()


# ---------------------------------------------------------------------------- the HTTP endpoint

def test_initialize_opens_a_session_and_negotiates_the_version(daemon):
    client = Mcp(daemon)
    r = client.initialize("2025-06-18")
    assert r.headers["Content-Type"].startswith("application/json")
    answer = r.json()
    assert answer["jsonrpc"] == "2.0" and answer["id"] == 0
    assert answer["result"]["protocolVersion"] == "2025-06-18"
    assert answer["result"]["serverInfo"]["name"] == "cellbox"
    assert "tools" in answer["result"]["capabilities"]
    # A version the server does not know gets its latest one (the client decides what to do).
    other = Mcp(daemon)
    answer = other.initialize("1999-01-01").json()
    assert answer["result"]["protocolVersion"] == LATEST_PROTOCOL
    assert other.session_id != client.session_id
    # Ids come back as they were sent, strings too.
    r = client.post({"jsonrpc": "2.0", "id": "abc", "method": "ping"})
    assert r.status_code == 200 and r.json() == {"jsonrpc": "2.0", "id": "abc", "result": {}}
    for session in (client, other):
        assert session.delete().status_code in (200, 204)


def test_notification_is_accepted_without_an_answer(mcp):
    r = mcp.post({"jsonrpc": "2.0", "method": "notifications/cancelled",
                  "params": {"requestId": 99, "reason": "test"}})
    assert r.status_code == 202 and r.content == b""
    # A response from the client (to a server request it never made) is accepted the same way.
    r = mcp.post({"jsonrpc": "2.0", "id": 5, "result": {}})
    assert r.status_code == 202 and r.content == b""


def test_request_without_session_id_is_400(mcp):
    r = mcp.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, session=False)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == -32600
    assert "Mcp-Session-Id" in r.json()["error"]["message"]


def test_unknown_session_is_404(mcp):
    r = mcp.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                 headers={"Mcp-Session-Id": "00000000-0000-4000-8000-000000000000"})
    assert r.status_code == 404, r.text
    assert r.json()["id"] == 1 and "initialize" in r.json()["error"]["message"]


def test_get_is_405(mcp):
    r = requests.get(mcp.url, headers=mcp.headers(extra={"Accept": "text/event-stream"}), timeout=TIMEOUT)
    assert r.status_code == 405, r.text
    assert "POST" in r.headers.get("Allow", "")


def test_unknown_method_and_bad_params(mcp):
    answer = mcp.request("resources/list")
    assert answer["error"]["code"] == -32601
    answer = mcp.request("tools/call", {"arguments": {}})
    assert answer["error"]["code"] == -32602
    answer = mcp.request("tools/call", {"name": "run_code", "arguments": [1]})
    assert answer["error"]["code"] == -32602
    # A missing argument is the tool's error, told to the model, not a protocol error.
    result = mcp.tool("run_code", {})
    assert result["isError"] and "code" in result["text"]


def test_delete_ends_the_session_and_deletes_its_sandbox(daemon, mcp):
    before = sandbox_ids(daemon)
    assert not mcp.tool("run_code", {"code": "z = 7"})["isError"]
    made = sandbox_ids(daemon) - before
    assert len(made) == 1, made
    (own,) = made
    assert sandboxes_by_id(daemon)[own]["metadata"].get("created_by") == "mcp"

    r = mcp.delete()
    assert r.status_code in (200, 204), r.text
    wait_until(lambda: own not in sandbox_ids(daemon), timeout=20,
               message="the session's sandbox to be deleted with the session")
    r = mcp.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert r.status_code == 404, r.text
    assert mcp.delete().status_code == 404
    mcp.session_id = None


def test_delete_keeps_sandboxes_made_with_create_sandbox(daemon, mcp):
    created = mcp.tool("create_sandbox", {"timeout_s": 600})
    assert not created["isError"], created
    made = sandbox_ids(daemon)
    sandbox_id = next(i for i in made if i in created["text"])
    assert mcp.delete().status_code in (200, 204)
    mcp.session_id = None
    time.sleep(0.5)
    assert sandbox_id in sandbox_ids(daemon), "create_sandbox's sandbox went with the session"
    assert daemon.client().delete(f"v1/sandboxes/{sandbox_id}").status_code in (200, 204)


def test_create_sandbox_takes_a_template(daemon, mcp):
    created = mcp.tool("create_sandbox", {"template": "python3", "timeout_s": 60})
    assert not created["isError"], created
    sandbox_id = next(i for i in sandbox_ids(daemon) if i in created["text"])
    assert daemon.client().get(f"v1/sandboxes/{sandbox_id}").json()["template"] == "python3"
    assert daemon.client().delete(f"v1/sandboxes/{sandbox_id}").status_code in (200, 204)
    unknown = mcp.tool("create_sandbox", {"template": "heavy"})
    assert unknown["isError"] and "'heavy'" in unknown["text"] and "python3" in unknown["text"], unknown
    wrong = mcp.tool("create_sandbox", {"template": 3})
    assert wrong["isError"] and "template" in wrong["text"], wrong


@pytest.mark.parametrize("start", ["exec", "zygote"])
def test_a_sessions_first_call_waits_for_its_new_sandbox(make_daemon, start):
    """No warm pool: the session's sandbox is made by its first call and is still starting when
    a command or a file operation needs it. The call waits for it, it is not refused (by exec
    the start takes a second; from the zygote some milliseconds)."""
    d = make_daemon(args=["--pool-size", "0"] + (["--zygote=false"] if start == "exec" else []))
    if start == "zygote":
        wait_until(lambda: d.client().get("api").json()["zygote_ready"], timeout=90, message="the zygote")
    for first in ("run_command", "write_file"):
        session = Mcp(d)
        session.initialize()
        if first == "run_command":
            result = session.tool("run_command", {"cmd": "echo first && pwd"})
            assert not result["isError"] and "first" in result["text"] and "/workspace" in result["text"], result
        else:
            result = session.tool("write_file", {"path": "first.txt", "content": "made first"})
            assert not result["isError"], result
            assert session.tool("read_file", {"path": "first.txt"})["text"] == "made first"
        assert len(sandbox_ids(d)) == 1
        assert session.delete().status_code in (200, 204)
        wait_until(lambda: not sandbox_ids(d), timeout=30, message="the session's sandbox to go")
    # A client that goes away while its call waits leaves nothing behind.
    session = Mcp(d)
    session.initialize()
    sock = raw_post(d, session, tool_call("run_command", {"cmd": "echo gone"}))
    wait_until(lambda: len(sandbox_ids(d)) == 1, timeout=30, message="the session's sandbox")
    sock.close()
    time.sleep(0.5)
    assert d.alive(), d.log_tail()
    assert session.tool("run_command", {"cmd": "echo still here"})["text"].strip().endswith("still here")
    assert session.delete().status_code in (200, 204)


def test_file_tools_refuse_a_dead_sandbox_as_v1_and_e2b_do(daemon, mcp):
    """MCP's file tools, /v1's files and E2B's envd files open a sandbox's files one way
    (box_open_files): a sandbox whose kernel died is refused by each with the same sentence."""
    api = daemon.client()
    r = api.post("v1/sandboxes", json={"timeout_s": 0})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    try:
        assert mcp.tool("write_file", {"sandbox_id": sid, "path": "before.txt", "content": "x"})["isError"] is False
        api.post(f"v1/sandboxes/{sid}/execute", json={"code": "import os; os._exit(7)"}, timeout=TIMEOUT)
        wait_until(lambda: api.get(f"v1/sandboxes/{sid}").json()["state"] == "dead", timeout=30,
                   message="the sandbox to die")
        r = api.get(f"v1/sandboxes/{sid}/files", params={"path": "before.txt"})
        assert r.status_code == 409, r.text
        sentence = r.json()["message"].split(";")[0]
        assert sentence.startswith(f"sandbox {sid} is dead: ") and "7" in sentence, sentence
        assert "restart" in r.json()["message"], r.text
        r = requests.get(daemon.origin + "/files", params={"path": "before.txt"}, timeout=TIMEOUT,
                         headers={"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983",
                                  "X-Access-Token": daemon.token})
        assert r.status_code == 409 and sentence in r.json()["message"], r.text
        for tool, arguments in (("read_file", {"path": "before.txt"}), ("list_files", {"path": "/workspace"}),
                                ("write_file", {"path": "after.txt", "content": "y"})):
            result = mcp.tool(tool, {"sandbox_id": sid, **arguments})
            assert result["isError"] and sentence in result["text"], (tool, result)
        assert daemon.alive(), daemon.log_tail()
    finally:
        api.delete(f"v1/sandboxes/{sid}")


def test_invalid_json_is_a_parse_error(mcp):
    r = mcp.post(b'{"jsonrpc": "2.0", "id": 1, "method": ')
    assert r.status_code == 400, r.text
    answer = r.json()
    assert answer["error"]["code"] == -32700 and answer["id"] is None


def test_batch_is_refused(mcp):
    batch = [{"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"jsonrpc": "2.0", "id": 2, "method": "ping"}]
    r = mcp.post(batch)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == -32600 and "batch" in r.json()["error"]["message"]


def test_not_jsonrpc_is_invalid_request(mcp):
    r = mcp.post({"id": 1, "method": "ping"})
    assert r.status_code == 400 and r.json()["error"]["code"] == -32600
    r = mcp.post({"jsonrpc": "2.0", "id": 2})
    assert r.status_code == 400 and r.json()["error"]["code"] == -32600


def test_unsupported_protocol_version_header_is_400(mcp):
    r = mcp.post({"jsonrpc": "2.0", "id": 1, "method": "ping"},
                 headers={"MCP-Protocol-Version": "1999-01-01"})
    assert r.status_code == 400, r.text
    assert "MCP-Protocol-Version" in r.json()["error"]["message"]
    r = mcp.post({"jsonrpc": "2.0", "id": 2, "method": "ping"},
                 headers={"MCP-Protocol-Version": "2025-06-18"})
    assert r.status_code == 200 and r.json()["result"] == {}


def test_token_is_required(daemon):
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                             "clientInfo": {"name": "pytest", "version": "0"}}}
    for token in ("", "wrong-" + daemon.token):
        r = Mcp(daemon, token=token).post(initialize, session=False)
        assert r.status_code == 401, r.text
        assert "Mcp-Session-Id" not in r.headers
    r = requests.get(daemon.origin + "/mcp", timeout=TIMEOUT)
    assert r.status_code == 401


def raw_post(daemon, mcp, message):
    """Sends a POST on a socket of its own and returns the socket, answer unread."""
    body = json.dumps(message).encode()
    head = (f"POST /mcp HTTP/1.1\r\nHost: {daemon.host}:{daemon.port}\r\n"
            f"Authorization: token {daemon.token}\r\nContent-Type: application/json\r\n"
            f"Accept: application/json, text/event-stream\r\nMcp-Session-Id: {mcp.session_id}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    sock = socket.create_connection((daemon.host, daemon.port), timeout=TIMEOUT)
    sock.sendall(head.encode() + body)
    return sock


def tool_call(name, arguments, request_id=77):
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}


def test_client_gone_in_the_middle_of_run_code(daemon, mcp):
    code = "open('/workspace/started', 'w').close()\nimport time\ntime.sleep(120)\nprint('finished')"
    sock = raw_post(daemon, mcp, tool_call("run_code", {"code": code}))
    wait_until(lambda: not mcp.tool("read_file", {"path": "started"})["isError"], timeout=60,
               message="the long cell to start")
    sock.close()
    # The abandoned cell is interrupted: the session's kernel takes the next one at once.
    started = time.monotonic()
    result = mcp.tool("run_code", {"code": "print('after')"}, timeout=90)
    waited = time.monotonic() - started
    assert not result["isError"] and "after" in result["text"], result
    assert waited < 30, f"the next cell waited {waited:.0f}s: the abandoned one was not interrupted"
    assert daemon.alive()
    # Another session works too.
    other = Mcp(daemon)
    other.initialize()
    assert other.request("ping")["result"] == {}
    other.delete()


@pytest.mark.parametrize("tool,arguments", [
    ("run_command", {"cmd": "touch /workspace/started; sleep 120"}),
    ("run", {"code": "import time\ntime.sleep(120)"}),
])
def test_client_gone_in_the_middle_of_a_command_or_run(daemon, mcp, tool, arguments):
    if tool == "run_command":
        assert not mcp.tool("run_command", {"cmd": "rm -f /workspace/started"})["isError"]
    sock = raw_post(daemon, mcp, tool_call(tool, arguments))
    if tool == "run_command":
        wait_until(lambda: not mcp.tool("read_file", {"path": "started"})["isError"], timeout=60,
                   message="the long command to start")
    else:
        time.sleep(2)
    sock.close()
    time.sleep(0.5)
    assert daemon.alive(), daemon.log_tail()
    result = mcp.tool("run_command", {"cmd": "echo still here"})
    assert not result["isError"] and "still here" in result["text"], result
    if tool == "run_command":
        # The abandoned command was killed, not left running in the sandbox.
        def sleeper_gone():
            ps = mcp.tool("run_command", {"cmd": "ps -eo args 2>/dev/null || ls /proc"})
            return "sleep 120" not in ps["text"]
        wait_until(sleeper_gone, timeout=20, message="the abandoned command to be killed")


def test_session_deleted_during_a_call(daemon, mcp):
    """DELETE /mcp while a tool call of the session runs in the session's sandbox: the call is
    answered with a tool error saying the sandbox was deleted, and the daemon carries on."""
    assert not mcp.tool("run_code", {"code": "1"})["isError"]
    sock = raw_post(daemon, mcp, tool_call("run_code", {"code": "import time\ntime.sleep(120)"}))
    time.sleep(1.5)
    assert mcp.delete().status_code in (200, 204)
    mcp.session_id = None
    sock.settimeout(30)
    received = b""
    with contextlib.suppress(OSError):
        while not received.endswith(b"0\r\n\r\n"):  # the end of the chunked answer
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
    sock.close()
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), received
    assert b'"id":77' in body and b'"isError":true' in body and b"deleted" in body, received
    assert daemon.alive(), daemon.log_tail()
    other = Mcp(daemon)
    other.initialize()
    assert other.request("ping")["result"] == {}
    other.delete()


# ---------------------------------------------------------------------------- cellbox mcp

def run_bridge(lines, url, token, timeout=120):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CELLBOX_")}
    env.update(CELLBOX_URL=url, CELLBOX_TOKEN=token)
    data = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    return subprocess.run([cli_binary(), "mcp"], input=data, capture_output=True, text=True,
                          env=env, timeout=timeout)


def initialize_message(request_id=1, protocol="2025-06-18"):
    return {"jsonrpc": "2.0", "id": request_id, "method": "initialize",
            "params": {"protocolVersion": protocol, "capabilities": {},
                       "clientInfo": {"name": "pytest", "version": "0"}}}


def answers(proc):
    """stdout as JSON-RPC messages, one a line (anything else fails the test)."""
    out = []
    for line in proc.stdout.splitlines():
        message = json.loads(line)
        assert message.get("jsonrpc") == "2.0", line
        out.append(message)
    return out


def test_bridge_against_the_daemon(daemon):
    before = sandbox_ids(daemon)
    proc = run_bridge([
        initialize_message(),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        "",
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "run_code", "arguments": {"code": "print(6 * 7)"}}},
        "this is not JSON",
        {"jsonrpc": "2.0", "id": "three", "method": "ping"},
        {"jsonrpc": "2.0", "id": 4, "method": "no/such/method"},
    ], daemon.origin, daemon.token)
    assert proc.returncode == 0, proc.stderr
    got = answers(proc)
    assert [m.get("id") for m in got] == [1, 2, None, "three", 4], proc.stdout
    assert got[0]["result"]["protocolVersion"] == "2025-06-18"
    assert "42" in got[1]["result"]["content"][0]["text"]
    assert got[2]["error"]["code"] == -32700
    assert got[3]["result"] == {}
    assert got[4]["error"]["code"] == -32601
    assert "Parse error" in proc.stderr  # said on stderr as well, never on stdout
    # At the end of stdin the bridge ended the session: its sandbox is gone.
    wait_until(lambda: sandbox_ids(daemon) == before, timeout=20,
               message="the bridge's session sandbox to be deleted")


def test_bridge_stopped_in_the_middle_of_a_call(daemon):
    """Hosts close stdin, then send SIGTERM when the server does not exit: the bridge abandons
    the call in flight, still ends the session (its sandbox goes) and exits at once."""
    before = sandbox_ids(daemon)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CELLBOX_")}
    env.update(CELLBOX_URL=daemon.origin, CELLBOX_TOKEN=daemon.token)
    bridge = subprocess.Popen([cli_binary(), "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env)
    try:
        for message in (initialize_message(), {"jsonrpc": "2.0", "method": "notifications/initialized"},
                        tool_call("run_code", {"code": "import time\ntime.sleep(120)"}, 2)):
            bridge.stdin.write(json.dumps(message) + "\n")
        bridge.stdin.flush()
        assert json.loads(bridge.stdout.readline())["id"] == 1
        wait_until(lambda: sandbox_ids(daemon) - before, timeout=30,
                   message="the session's sandbox to be made")
        time.sleep(1)
        bridge.stdin.close()  # the call is still running: the bridge cannot read stdin yet
        bridge.send_signal(signal.SIGTERM)
        bridge.wait(timeout=15)
    finally:
        if bridge.poll() is None:
            bridge.kill()
            bridge.wait()
    assert bridge.returncode == 0, bridge.stderr.read()
    assert bridge.stdout.read() == ""  # no answer to the abandoned call, nothing else
    wait_until(lambda: sandbox_ids(daemon) == before, timeout=20,
               message="the bridge's session sandbox to be deleted")


def test_bridge_with_a_wrong_token(daemon):
    proc = run_bridge([initialize_message(), {"jsonrpc": "2.0", "method": "notifications/initialized"}],
                      daemon.origin, "wrong")
    assert proc.returncode == 0, proc.stderr
    got = answers(proc)
    assert len(got) == 1 and got[0]["id"] == 1, proc.stdout
    error = got[0]["error"]
    assert error["code"] == -32000 and "401" in error["message"] and "CELLBOX_TOKEN" in error["message"]
    assert "401" in proc.stderr


def test_bridge_without_a_daemon():
    url = f"http://127.0.0.1:{free_port()}"
    proc = run_bridge([initialize_message(7), {"jsonrpc": "2.0", "method": "notifications/initialized"}],
                      url, "token", timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = answers(proc)
    assert len(got) == 1 and got[0]["id"] == 7, proc.stdout  # the notification gets no answer
    error = got[0]["error"]
    assert error["code"] == -32000 and url in error["message"] and "CELLBOX_URL" in error["message"]
    assert "cannot reach cellboxd" in proc.stderr


class FakeMcpServer(http.server.ThreadingHTTPServer):
    """Records every request (method, headers, body) and answers as a streamable HTTP server
    may: JSON, 202, an SSE stream, an error page that is not JSON-RPC."""

    def __init__(self):
        self.seen = []
        super().__init__(("127.0.0.1", 0), FakeMcpHandler)


class FakeMcpHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, status, body=b"", content_type="application/json", headers=None):
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if body:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_DELETE(self):
        self.server.seen.append(("DELETE", dict(self.headers), None))
        self.answer(204)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen.append(("POST", dict(self.headers), body))
        method = body.get("method")
        if method == "initialize":
            reply = {"jsonrpc": "2.0", "id": body["id"],
                     "result": {"protocolVersion": "2025-03-26", "capabilities": {},
                                "serverInfo": {"name": "fake", "version": "0"}}}
            self.answer(200, json.dumps(reply, indent=2).encode(), headers={"Mcp-Session-Id": "fake-session"})
        elif "id" not in body:
            self.answer(202)
        elif method == "tools/list":
            events = (b": a comment\nevent: message\nid: 1\n"
                      b"data: {\"jsonrpc\": \"2.0\", \"id\": " + json.dumps(body["id"]).encode() +
                      b",\ndata: \"result\": {\"tools\": []}}\n\n")
            self.answer(200, events, content_type="text/event-stream")
        else:
            self.answer(502, b"<html>bad gateway</html>", content_type="text/html")


def test_bridge_headers_and_answers_with_a_fake_server():
    server = FakeMcpServer()
    with serving_in_thread(server) as url:
        proc = run_bridge([initialize_message(1, "2025-03-26"),
                           {"jsonrpc": "2.0", "method": "notifications/initialized"},
                           {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                           {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "x"}}],
                          url + "/", "secret", timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = answers(proc)
    assert [m["id"] for m in got] == [1, 2, 3], proc.stdout
    assert got[0]["result"]["serverInfo"]["name"] == "fake"  # re-written onto one line
    assert got[1]["result"] == {"tools": []}                 # from the event stream
    assert got[2]["error"]["code"] == -32000 and "HTTP 502" in got[2]["error"]["message"]

    seen = server.seen
    assert [s[0] for s in seen] == ["POST", "POST", "POST", "POST", "DELETE"], seen
    for method, headers, _ in seen:
        headers = {k.lower(): v for k, v in headers.items()}
        assert headers["authorization"] == "token secret"
        if method == "POST":
            assert headers["content-type"] == "application/json"
            accept = [a.strip() for a in headers["accept"].split(",")]
            assert "application/json" in accept and "text/event-stream" in accept
    first = {k.lower(): v for k, v in seen[0][1].items()}
    assert "mcp-session-id" not in first and "mcp-protocol-version" not in first
    for _, headers, _ in seen[1:]:
        headers = {k.lower(): v for k, v in headers.items()}
        assert headers["mcp-session-id"] == "fake-session"
        assert headers["mcp-protocol-version"] == "2025-03-26"
    assert seen[0][0] == "POST" and seen[0][2]["method"] == "initialize"


def test_bridge_help_and_usage():
    r = subprocess.run([cli_binary(), "mcp", "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "usage: cellbox mcp" in r.stdout
    r = subprocess.run([cli_binary(), "help"], capture_output=True, text=True, timeout=30)
    assert any(line.split()[:1] == ["mcp"] for line in r.stdout.splitlines()), r.stdout
    r = subprocess.run([cli_binary(), "mcp", "extra"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and r.stdout == "" and "extra" in r.stderr
