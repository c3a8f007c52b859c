"""E2B's getHost against cellboxd: a server inside a sandbox reached through the daemon's port.

- The SDK (tests/clients/node/e2b_ports.mjs) creates two sandboxes, starts a small HTTP server on
  127.0.0.1:8000 inside each, and reaches it through cellboxd with the Host `getHost(8000)`
  names (<port>-<sandboxId>.<domain>): a file, a 5 MiB file, a POST with a body, each sandbox its
  own server, a port nothing listens on, an unknown sandbox, envd's port on the same host, a
  wrong token, a killed sandbox. Every step is checked here again.
- The domain: --e2b-domain, and its default (localhost with the daemon's port), on the wire.

The sandboxes get no network: the daemon opens the socket inside each sandbox's own network
namespace (docs/security.md)."""
import json
import os
import shutil
import subprocess

import pytest
import requests

from helpers.daemon import Daemon

pytestmark = pytest.mark.cellbox_only  # Jupyter Server has no E2B API

NODE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node")
TIMEOUT = 180


def run_ports_client(daemon, timeout=TIMEOUT):
    node = shutil.which("node")
    assert node, "node is not installed (scripts/install-deps.sh test installs it)"
    assert os.path.isdir(os.path.join(NODE_DIR, "node_modules", "@e2b", "code-interpreter")), \
        "npm packages missing: run `scripts/install-deps.sh test` (npm ci in tests/clients/node)"
    env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
    env.update(E2B_API_URL=daemon.origin, E2B_SANDBOX_URL=daemon.origin, E2B_API_KEY=daemon.token,
               CELLBOX_CLIENT_DEADLINE_MS=str((timeout - 20) * 1000))
    proc = subprocess.run([node, "e2b_ports.mjs"], cwd=NODE_DIR, env=env, capture_output=True,
                          text=True, timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no summary from the client (exit {proc.returncode})\nstderr:\n{proc.stderr[-4000:]}"
    return proc, json.loads(lines[-1])


def test_sdk_reaches_servers_in_sandboxes(daemon):
    proc, summary = run_ports_client(daemon)
    steps = summary["steps"]
    detail = f"exit {proc.returncode}\nsummary: {json.dumps(summary, indent=1)[:6000]}\nstderr:\n{proc.stderr[-3000:]}"
    expected = ["create", "servers", "get_host", "get_file", "big_file", "post", "own_server_each",
                "websocket", "nothing_listening", "unknown_sandbox", "envd_port", "no_token", "kill"]
    missing = [s for s in expected if s not in steps]
    assert not missing, f"steps never reported: {missing}\n{detail}"
    failed = {name: s for name, s in steps.items() if not s["ok"]}
    assert not failed, f"failed steps: {failed}\n{detail}"
    assert proc.returncode == 0, detail

    a, b = steps["create"]["a"], steps["create"]["b"]
    # getHost: <port>-<id>.<domain>, the domain create answered (localhost with the daemon's port)
    assert steps["get_host"]["host"] == f"8000-{a}.localhost:{daemon.port}"

    assert steps["get_file"]["text"] == "hello from sandbox a\n"
    assert steps["get_file"]["content_type"].startswith("text/plain")
    assert steps["big_file"]["length"] == 5 * 1024 * 1024 and steps["big_file"]["same"]

    post = steps["post"]
    seen = post["seen"]
    assert post["status"] == 201 and post["x_inner"] == "yes"
    assert seen["method"] == "POST" and seen["path"] == "/submit?x=1&y=a%20b"
    assert seen["length"] == post["sent_length"] and seen["sha256"] == post["sent_sha256"]
    # the inner server sees itself addressed as localhost:<port>, the client's host forwarded
    assert seen["host"] == "localhost:8000"
    assert seen["headers"]["x-forwarded-host"] == f"8000-{a}.localhost:{daemon.port}"
    assert seen["headers"]["x-custom"] == "kept"
    # cellbox's token never reaches the sandbox's server
    assert "e2b-traffic-access-token" not in seen["headers"]
    assert not any(daemon.token in v for v in seen["headers"].values())

    # each sandbox reaches its own server on the same port
    assert steps["own_server_each"]["a"] == "hello from sandbox a\n"
    assert steps["own_server_each"]["b"] == "hello from sandbox b\n"

    # a WebSocket: the inner server's 101 and headers, then frames both ways, a large one too
    ws = steps["websocket"]
    assert ws["x_inner_ws"] == "yes"
    assert ws["received"] == ["echo: ping-1", {"binary": 200 * 1024, "same": True}, "echo: ping-2",
                              {"closed": 1000}]

    refused = steps["nothing_listening"]["body"]
    assert refused["code"] == 502
    assert "port 8009 is not open" in refused["message"]
    assert "0.0.0.0:8009 or 127.0.0.1:8009" in refused["message"]
    unknown = steps["unknown_sandbox"]["body"]
    assert unknown["code"] == 502 and "not found" in unknown["message"]
    assert steps["no_token"]["status"] == 401
    gone = steps["kill"]["body"]
    assert gone["code"] == 502 and a in gone["message"]


@pytest.fixture
def domain_daemon():
    d = Daemon(args=["--e2b-domain", "sandbox.example.test"])
    d.start()
    yield d
    d.stop()
    d.remove_tmp()


def test_configured_domain_names_the_hosts(domain_daemon):
    """create answers the configured domain; hosts under it route, hosts under another do not."""
    origin, token = domain_daemon.origin, domain_daemon.token
    created = requests.post(f"{origin}/sandboxes", json={"templateID": "python3"},
                            headers={"X-API-Key": token}, timeout=60)
    assert created.status_code == 201, created.text
    sandbox_id = created.json()["sandboxID"]
    assert created.json()["domain"] == "sandbox.example.test"
    try:
        headers = {"X-API-Key": token, "Host": f"8000-{sandbox_id}.sandbox.example.test"}
        refused = requests.get(f"{origin}/", headers=headers, timeout=30)
        assert refused.status_code == 502
        assert "port 8000 is not open" in refused.json()["message"]
        # envd's port on the same host is cellbox's own route
        headers["Host"] = f"49983-{sandbox_id}.sandbox.example.test"
        assert requests.get(f"{origin}/health", headers=headers, timeout=30).status_code in (200, 204)
        # another domain is not a sandbox host: the daemon's own routes answer
        headers["Host"] = f"8000-{sandbox_id}.elsewhere.test"
        other = requests.get(f"{origin}/sandboxes", headers=headers, timeout=30)
        assert other.status_code == 200 and isinstance(other.json(), list)
    finally:
        requests.delete(f"{origin}/sandboxes/{sandbox_id}", headers={"X-API-Key": token}, timeout=30)
