"""A networked sandbox and its egress lists from every surface but E2B's (that one is
tests/clients/test_e2b_network.py): Kernel Gateway env, MCP tools, the CLI, and pip from cells and
commands in /v1 sandboxes, with and without a network. One cellboxd with --allow-network and the
tests' own small internet (helpers/test_internet.py): the web server at 203.0.113.10 and the
package index at 203.0.113.20 (serving the wheel cellbox-nettest) are the only addresses used.

Each test asserts what the sandbox really reached (or was refused), not only what was answered."""
import json
import os
import subprocess

import pytest
import requests

from helpers.daemon import Daemon, cli_binary, serve
from helpers.test_internet import INDEX_ADDRESS, WEB_ADDRESS, small_internet
from helpers.v1 import V1

pytestmark = pytest.mark.cellbox_only

DAEMON_ARGS = ["--allow-network", "--network-range", "10.93.1.0/24"]
TIMEOUT = 120
NO_NETWORK_NOTE = "cellbox: this sandbox has no network, so pip could not reach"

# Whether the sandbox gets an HTTP answer (any status) from each outside host. The firewall drops
# what it denies, so a denied host costs the whole timeout: both are tried at once, and the
# timeout is long enough that a loaded machine's slow answer is not read as a refusal.
REACH = """
import concurrent.futures, urllib.error, urllib.request
def _reach(host):
    try:
        urllib.request.urlopen(f'http://{host}/', timeout=10).read()
    except urllib.error.HTTPError:
        pass
    except Exception:
        return False
    return True
with concurrent.futures.ThreadPoolExecutor(2) as _pool:
    _web, _index = _pool.map(_reach, (%r, %r))
{'web': _web, 'index': _index}
""" % (WEB_ADDRESS, INDEX_ADDRESS)


@pytest.fixture(scope="module")
def internet():
    with small_internet(big_file_bytes=1024 * 1024) as built:
        yield built


@pytest.fixture(scope="module")
def daemon(internet):
    yield from serve(Daemon(args=DAEMON_ARGS).start())


@pytest.fixture(scope="module")
def v1(daemon):
    client = V1(daemon)
    yield client
    client.cleanup()


def reached_from_v1(v1, sid):
    return eval(v1.value(sid, REACH))  # a dict literal the sandbox printed


def pip_install(internet, how):
    return (f"{how} install --index-url {internet.index_url} --trusted-host {INDEX_ADDRESS} "
            f"{internet.wheel_project}")


def output_of(events):
    return events.stdout + events.stderr


# ---- Kernel Gateway: KERNEL_CELLBOX_NETWORK... env ----

def test_kernel_gateway_env_asks_for_a_network_and_its_lists(daemon):
    client = daemon.client()
    try:
        model = client.create_kernel(env={"KERNEL_CELLBOX_NETWORK": "1",
                                          "KERNEL_CELLBOX_NETWORK_ALLOW_OUT": f" {INDEX_ADDRESS} ",
                                          "KERNEL_CELLBOX_NETWORK_DENY_OUT": "0.0.0.0/0,"})
        with client.ready_ws(model["id"]) as ws:
            reached = eval(ws.execute(REACH, timeout=60).result_data()["text/plain"])
        assert reached == {"web": False, "index": True}
        network = client.get(f"v1/sandboxes/{model['id']}").json()["network"]
        assert network["allowOut"] == [INDEX_ADDRESS] and network["denyOut"] == ["0.0.0.0/0"]
    finally:
        client.cleanup()


def test_kernel_gateway_body_network_takes_v1s_shape(daemon):
    """"network": {} asks for a network as true does; a bad entry in its lists is 400 naming it
    (and not the env variables, which the request did not use)."""
    client = daemon.client()
    try:
        model = client.create_kernel(network={})
        network = client.get(f"v1/sandboxes/{model['id']}").json()["network"]
        assert network["allowOut"] == [] and network["denyOut"] == [], network
        r = client.post("api/kernels", json={"network": {"denyOut": ["203.0.113.0/33"]}})
        assert r.status_code == 400 and "denyOut" in r.json()["message"], r.text
        assert "KERNEL_CELLBOX" not in r.json()["message"], r.text
    finally:
        client.cleanup()


@pytest.mark.parametrize("env,named", [
    ({"KERNEL_CELLBOX_NETWORK": "yes"}, "KERNEL_CELLBOX_NETWORK"),
    ({"KERNEL_CELLBOX_NETWORK_DENY_OUT": "203.0.113.0/33"}, "KERNEL_CELLBOX_NETWORK_ALLOW_OUT and _DENY_OUT"),
    ({"KERNEL_CELLBOX_NETWORK": "0", "KERNEL_CELLBOX_NETWORK_ALLOW_OUT": WEB_ADDRESS},
     "KERNEL_CELLBOX_NETWORK_ALLOW_OUT"),
])
def test_kernel_gateway_bad_network_env_is_400_naming_it(daemon, env, named):
    client = daemon.client()
    before = len(client.get("api/kernels").json())
    r = client.post("api/kernels", json={"env": env})
    assert r.status_code == 400 and named in r.json()["message"], r.text
    assert len(client.get("api/kernels").json()) == before


# ---- MCP: create_sandbox {network}, update_network ----

class McpSession:
    """One MCP session on /mcp, driven with plain JSON-RPC."""

    def __init__(self, daemon):
        self.url, self.token, self.session, self.next_id = daemon.origin + "/mcp", daemon.token, None, 0

    def post(self, message):
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                   "Authorization": f"token {self.token}"}
        if self.session:
            headers["Mcp-Session-Id"] = self.session
        return requests.post(self.url, data=json.dumps(message), headers=headers, timeout=TIMEOUT)

    def initialize(self):
        r = self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                       "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                  "clientInfo": {"name": "pytest", "version": "0"}}})
        assert r.status_code == 200, r.text
        self.session = r.headers["Mcp-Session-Id"]
        assert self.post({"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202

    def tool(self, name, arguments):
        self.next_id += 1
        r = self.post({"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call",
                       "params": {"name": name, "arguments": arguments}})
        assert r.status_code == 200, r.text
        result = r.json()["result"]
        return result.get("isError", False), "\n".join(c["text"] for c in result["content"]
                                                       if c["type"] == "text")

    def end(self):
        requests.delete(self.url, headers={"Authorization": f"token {self.token}",
                                           "Mcp-Session-Id": self.session}, timeout=TIMEOUT)


def test_mcp_create_sandbox_with_network_and_update_network(daemon, v1):
    mcp = McpSession(daemon)
    mcp.initialize()
    made = []
    try:
        failed, text = mcp.tool("create_sandbox", {"network": {"allowOut": [WEB_ADDRESS],
                                                               "denyOut": ["0.0.0.0/0"]}})
        assert not failed and "with network" in text, text
        sid = text.split()[2]
        made.append(sid)
        assert reached_from_v1(v1, sid) == {"web": True, "index": False}
        failed, text = mcp.tool("update_network", {"sandbox_id": sid, "denyOut": [WEB_ADDRESS]})
        assert not failed and INDEX_ADDRESS not in text, text
        assert reached_from_v1(v1, sid) == {"web": False, "index": True}
        failed, text = mcp.tool("create_sandbox", {})
        plain = text.split()[2]
        made.append(plain)
        assert not failed and "no network" in text, text
        failed, text = mcp.tool("update_network", {"sandbox_id": plain, "denyOut": []})
        assert failed and "has no network" in text and '"network": true' in text, text
        assert reached_from_v1(v1, plain) == {"web": False, "index": False}
        failed, text = mcp.tool("update_network", {"sandbox_id": sid, "allowOut": ["10.0.0.0/33"]})
        assert failed and "allowOut" in text, text
        assert reached_from_v1(v1, sid) == {"web": False, "index": True}  # the lists stand
    finally:
        mcp.end()
        for made_id in made:  # create_sandbox's sandboxes outlive the session
            v1.remove(made_id)


# ---- CLI: create --network --allow-out/--deny-out, network, info ----

def cellbox(daemon, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CELLBOX_")}
    env.update(CELLBOX_URL=daemon.origin, CELLBOX_TOKEN=daemon.token)
    return subprocess.run([cli_binary(), *args], capture_output=True, text=True, env=env,
                          timeout=TIMEOUT, stdin=subprocess.DEVNULL)


def cellbox_ok(daemon, *args):
    r = cellbox(daemon, *args)
    assert r.returncode == 0, f"cellbox {' '.join(args)} -> {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def test_cli_create_network_info(daemon, v1):
    sid = cellbox_ok(daemon, "create", "--deny-out", "0.0.0.0/0", "--allow-out", INDEX_ADDRESS).strip()
    plain = cellbox_ok(daemon, "create").strip()
    try:
        assert reached_from_v1(v1, sid) == {"web": False, "index": True}
        info = cellbox_ok(daemon, "info", sid)
        address = v1.model(sid)["network"]["address"]
        assert f"network:  address {address}" in info, info
        assert f"allowOut {INDEX_ADDRESS}" in info and "denyOut  0.0.0.0/0" in info, info
        shown = cellbox_ok(daemon, "network", sid, "--deny-out", INDEX_ADDRESS)
        assert f"denyOut  {INDEX_ADDRESS}" in shown and "allowOut -" in shown, shown
        assert reached_from_v1(v1, sid) == {"web": True, "index": False}
        cellbox_ok(daemon, "network", sid, "--clear")
        assert reached_from_v1(v1, sid) == {"web": True, "index": True}
        assert "network:  none" in cellbox_ok(daemon, "info", plain)
        r = cellbox(daemon, "network", plain, "--deny-out", "0.0.0.0/0")
        assert r.returncode == 4 and "has no network" in r.stderr, r.stderr
        assert reached_from_v1(v1, plain) == {"web": False, "index": False}
    finally:
        for s in (sid, plain):
            v1.remove(s)


# ---- pip from cells and commands (/v1) ----

def test_percent_pip_and_bang_pip_install_from_the_index_then_import(v1, internet):
    box = v1.create(timeout_s=0, network=True)
    sid = box["id"]
    ev = v1.execute(sid, pip_install(internet, "%pip"), timeout=TIMEOUT)
    assert not ev.errors and "Successfully installed" in output_of(ev), output_of(ev)
    greeting = f"import {internet.wheel_package}\n{internet.wheel_package}.GREETING"
    assert v1.value(sid, greeting) == repr(internet.wheel_greeting)
    ev = v1.execute(sid, "!" + pip_install(internet, "pip") + " --force-reinstall", timeout=TIMEOUT)
    assert "Successfully installed" in output_of(ev), output_of(ev)
    v1.remove(sid)


def test_without_network_pip_says_how_to_get_one_from_command_and_cell(v1, internet):
    sid = v1.create(timeout_s=0)["id"]
    surfaces = ['"network": true', "allowInternetAccess: true", "KERNEL_CELLBOX_NETWORK=1",
                "cellbox create --network", "--allow-network"]
    outputs = {
        "command": output_of(v1.command(sid, pip_install(internet, "pip"), timeout=TIMEOUT)),
        "%pip": output_of(v1.execute(sid, pip_install(internet, "%pip"), timeout=TIMEOUT)),
        "!pip": output_of(v1.execute(sid, "!" + pip_install(internet, "pip"), timeout=TIMEOUT)),
    }
    for how, text in outputs.items():
        last = [line for line in text.splitlines() if line.strip()][-1]
        assert last.startswith(NO_NETWORK_NOTE) and INDEX_ADDRESS in last, (how, text)
        assert all(s in last for s in surfaces), (how, last)
    v1.remove(sid)


def test_a_networked_sandbox_denied_the_index_is_not_told_it_has_no_network(v1, internet):
    sid = v1.create(timeout_s=0, network={"denyOut": [INDEX_ADDRESS]})["id"]
    ev = v1.command(sid, pip_install(internet, "pip") + " --retries 0 --timeout 3", timeout=TIMEOUT)
    assert ev[-1]["exit_code"] != 0, output_of(ev)
    assert "has no network" not in output_of(ev), output_of(ev)
    v1.remove(sid)
