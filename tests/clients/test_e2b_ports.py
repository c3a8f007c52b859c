"""E2B's getHost against cellboxd: a server inside a sandbox reached through the daemon's port.

- The SDK (tests/clients/node/e2b_ports.mjs) creates two sandboxes, starts a small HTTP server on
  127.0.0.1:8000 inside each, and reaches it through cellboxd with the Host `getHost(8000)`
  names (<port>-<sandboxId>.<domain>): a file, a 5 MiB file, a POST with a body, each sandbox its
  own server, a port only the second sandbox listens on (not reachable through the first's id),
  a WebSocket echo server, a port nothing listens on, an unknown sandbox, envd's port on the
  same host, a wrong token, a killed sandbox. Every step is checked here again.
- On the wire: --e2b-domain; cellbox's token kept from the inner server (query and headers);
  HEAD, 304 and 404 as the inner server answers them; a paused sandbox; a sandbox on the host's
  network refused (its 127.0.0.1 is the host's).

The sandboxes get no network: the daemon opens the socket inside each sandbox's own network
namespace (docs/security.md)."""
import hashlib
import json
import os
import socket
import time

import pytest
import requests

from helpers.daemon import SANITIZER_MARKERS, Daemon
from helpers.e2b import api
from helpers.node_clients import assert_every_step_passed, run_e2b_script

pytestmark = pytest.mark.cellbox_only  # Jupyter Server has no E2B API

TIMEOUT = 180


def test_sdk_reaches_servers_in_sandboxes(daemon):
    proc, steps, detail = run_e2b_script(daemon, "e2b_ports.mjs", TIMEOUT)
    expected = ["create", "servers", "get_host", "get_file", "big_file", "post", "own_server_each",
                "neighbour_port", "websocket", "nothing_listening", "unknown_sandbox", "envd_port", "no_token", "kill"]
    assert_every_step_passed(proc, steps, detail, expected)

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

    # a port only the second sandbox listens on is not reachable through the first's id
    assert steps["neighbour_port"]["through_a"] == 502
    assert steps["neighbour_port"]["through_b_text"] == "hello from sandbox b\n"

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


# ---- on the wire ----

def execute(daemon, sandbox_id, code):
    """Runs code in the sandbox's default context (E2B's code interpreter route); its stdout."""
    r = requests.post(daemon.origin + "/execute", json={"code": code}, timeout=60,
                      headers={"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": "49999",
                               "X-Access-Token": daemon.token})
    assert r.status_code == 200, r.text
    events = [json.loads(line) for line in r.text.splitlines()]
    errors = [e for e in events if e["type"] == "error"]
    assert not errors, errors
    return "".join(e["text"] for e in events if e["type"] == "stdout")


# A server answering each request with what it saw (JSON), HEAD and 304 as http.server does.
ECHO_SERVER = r'''
import hashlib, http.server, json, sys
class Handler(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *a, **k):
        super().__init__(*a, directory='/workspace', **k)
    def read_body(self):
        if self.headers.get('Transfer-Encoding') != 'chunked':
            return self.rfile.read(int(self.headers.get('Content-Length') or 0))
        body = b''
        while True:
            size = int(self.rfile.readline().split(b';')[0], 16)
            chunk = self.rfile.read(size + 2)[:size]
            if size == 0:
                return body
            body += chunk
    def do_POST(self):
        body = self.read_body()
        answer = json.dumps({'path': self.path, 'headers': {k.lower(): v for k, v in self.headers.items()},
                             'length': len(body), 'sha256': hashlib.sha256(body).hexdigest(),
                             'body': body[:100].decode(errors='replace')}).encode()
        self.send_response(200)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), Handler).serve_forever()
'''

START = '''
import socket, subprocess, time
open('/workspace/echo.py', 'w').write({source!r})
open('/workspace/page.txt', 'w').write('a page\\n')
subprocess.Popen(['python3', '/workspace/echo.py', '{port}'], start_new_session=True)
for attempt in range(100):
    try:
        socket.create_connection(('127.0.0.1', {port}), timeout=1).close()
        print('listening')
        break
    except OSError:
        time.sleep(0.1)
'''


@pytest.fixture
def served(daemon):
    """A sandbox whose echo server listens on 127.0.0.1:9000; yields (sandbox id, host)."""
    r = api(daemon, "POST", "/sandboxes", json={"templateID": "python3", "timeout": 120})
    assert r.status_code == 201, r.text
    sandbox_id = r.json()["sandboxID"]
    try:
        assert execute(daemon, sandbox_id, START.format(source=ECHO_SERVER, port=9000)) == "listening\n"
        yield sandbox_id, f"9000-{sandbox_id}.{r.json()['domain']}"
    finally:
        api(daemon, "DELETE", f"/sandboxes/{sandbox_id}")


def test_token_in_the_query_is_not_passed_on(daemon, served):
    sandbox_id, host = served
    r = requests.post(f"{daemon.origin}/echo?token={daemon.token}&keep=1", data="body",
                      headers={"Host": host, "Authorization": f"token {daemon.token}",
                               "X-Access-Token": daemon.token}, timeout=30)
    assert r.status_code == 200, r.text
    seen = r.json()
    assert seen["path"] == "/echo?keep=1" and seen["body"] == "body"
    assert "authorization" not in seen["headers"] and "x-access-token" not in seen["headers"]
    # an Authorization of the inner server's own goes on (cellbox's token then in ?token=, since
    # an Authorization header is what the daemon reads before E2B's headers)
    r = requests.post(f"{daemon.origin}/echo?token={daemon.token}", timeout=30,
                      headers={"Host": host, "Authorization": "Bearer app-own"})
    assert r.status_code == 200, r.text
    assert r.json()["headers"]["authorization"] == "Bearer app-own"
    assert r.json()["path"] == "/echo"


def test_bodies_stream_past_the_body_size_limit(daemon, served):
    """A proxied body is not held whole: 40 MiB (past --max-body-size, 16 MiB) with its length,
    and a chunked one of unknown length, reach the inner server whole."""
    sandbox_id, host = served
    headers = {"Host": host, "E2B-Traffic-Access-Token": daemon.token}
    big = os.urandom(1 << 20) * 40
    r = requests.post(f"{daemon.origin}/upload", data=big, headers=headers, timeout=120)
    assert r.status_code == 200, r.text
    assert r.json()["length"] == len(big)
    assert r.json()["sha256"] == hashlib.sha256(big).hexdigest()
    assert r.json()["headers"]["content-length"] == str(len(big))

    pieces = [os.urandom(100_000) for _ in range(30)]
    r = requests.post(f"{daemon.origin}/upload", data=iter(pieces), headers=headers, timeout=120)
    assert r.status_code == 200, r.text
    assert r.json()["headers"]["transfer-encoding"] == "chunked"
    assert r.json()["length"] == 3_000_000
    assert r.json()["sha256"] == hashlib.sha256(b"".join(pieces)).hexdigest()


def test_a_post_to_a_closed_port_is_answered_after_its_body(daemon, served):
    sandbox_id, host = served
    r = requests.post(f"{daemon.origin}/upload", data=os.urandom(5 << 20), timeout=60,
                      headers={"Host": host.replace("9000-", "9009-", 1),
                               "E2B-Traffic-Access-Token": daemon.token})
    assert r.status_code == 502 and "port 9009 is not open" in r.json()["message"]


def test_head_and_not_modified_come_back_as_the_server_answers(daemon, served):
    sandbox_id, host = served
    headers = {"Host": host, "E2B-Traffic-Access-Token": daemon.token}
    head = requests.head(f"{daemon.origin}/page.txt", headers=headers, timeout=30)
    assert head.status_code == 200 and head.text == ""
    assert head.headers["Last-Modified"]
    again = requests.get(f"{daemon.origin}/page.txt", timeout=30,
                         headers={**headers, "If-Modified-Since": head.headers["Last-Modified"]})
    assert again.status_code == 304 and again.text == ""
    missing = requests.get(f"{daemon.origin}/no-such-file", headers=headers, timeout=30)
    assert missing.status_code == 404  # the inner server's own answer


def test_a_paused_sandbox_says_so(daemon, served):
    sandbox_id, host = served
    assert api(daemon, "POST", f"/sandboxes/{sandbox_id}/pause").status_code == 204
    r = requests.get(f"{daemon.origin}/page.txt", timeout=30,
                     headers={"Host": host, "E2B-Traffic-Access-Token": daemon.token})
    assert r.status_code == 502 and r.json()["code"] == 502
    assert f"sandbox {sandbox_id} is paused" in r.json()["message"]
    assert api(daemon, "POST", f"/sandboxes/{sandbox_id}/connect", json={}).status_code == 201
    r = requests.get(f"{daemon.origin}/page.txt", timeout=30,
                     headers={"Host": host, "E2B-Traffic-Access-Token": daemon.token})
    assert r.status_code == 200 and r.text == "a page\n"


def test_traffic_resumes_a_sandbox_whose_lifecycle_says_auto_resume(daemon):
    """lifecycle {onTimeout: 'pause', autoResume: true}: a request to one of its ports resumes
    the paused sandbox first, as a call into its envd does, and its server answers."""
    r = api(daemon, "POST", "/sandboxes", json={"templateID": "python3", "timeout": 120,
                                               "autoPause": True, "autoResume": {"enabled": True}})
    assert r.status_code == 201, r.text
    sandbox_id = r.json()["sandboxID"]
    try:
        assert execute(daemon, sandbox_id, START.format(source=ECHO_SERVER, port=9000)) == "listening\n"
        host = f"9000-{sandbox_id}.{r.json()['domain']}"
        assert api(daemon, "POST", f"/sandboxes/{sandbox_id}/pause").status_code == 204
        assert api(daemon, "GET", f"/sandboxes/{sandbox_id}").json()["state"] == "paused"
        r = requests.get(f"{daemon.origin}/page.txt", timeout=30,
                         headers={"Host": host, "E2B-Traffic-Access-Token": daemon.token})
        assert r.status_code == 200 and r.text == "a page\n", r.text
        assert api(daemon, "GET", f"/sandboxes/{sandbox_id}").json()["state"] == "running"
    finally:
        api(daemon, "DELETE", f"/sandboxes/{sandbox_id}")


def test_a_sandboxs_own_credential_opens_only_its_own_envd(daemon):
    """A sandbox's envd access token (what E2B's SDK holds for it) opens that sandbox's envd on its
    host, never a server inside it nor another sandbox's host (403, naming what opens them); the
    daemon's token opens them."""
    made = [api(daemon, "POST", "/sandboxes", json={"templateID": "python3", "timeout": 120})
            for _ in range(2)]
    assert all(r.status_code == 201 for r in made), [r.text for r in made]
    (a, a_token, domain), (b, _, _) = [(r.json()["sandboxID"], r.json()["envdAccessToken"],
                                        r.json()["domain"]) for r in made]
    try:
        assert execute(daemon, a, START.format(source=ECHO_SERVER, port=9000)) == "listening\n"
        own = {"X-Access-Token": a_token, "E2b-Sandbox-Id": a}
        r = requests.get(f"{daemon.origin}/health", headers={**own, "Host": f"49983-{a}.{domain}"},
                         timeout=30)
        assert r.status_code == 204, r.text  # its own envd
        for host in (f"9000-{a}.{domain}", f"49983-{b}.{domain}", f"49999-{b}.{domain}"):
            r = requests.get(f"{daemon.origin}/health", headers={**own, "Host": host}, timeout=30)
            assert r.status_code == 403, (host, r.text)
            assert "daemon's token" in r.json()["message"], r.text
        # the daemon's token opens the same server
        r = requests.get(f"{daemon.origin}/page.txt", timeout=30,
                         headers={"Host": f"9000-{a}.{domain}", "E2B-Traffic-Access-Token": daemon.token})
        assert r.status_code == 200 and r.text == "a page\n", r.text
    finally:
        for sandbox_id in (a, b):
            api(daemon, "DELETE", f"/sandboxes/{sandbox_id}")


@pytest.fixture
def network_daemon():
    d = Daemon(args=["--allow-network"])
    d.start()
    yield d
    d.stop()
    d.remove_tmp()


def test_a_networked_sandboxs_ports_are_its_own(network_daemon):
    """A sandbox with internet access keeps a network namespace of its own (with its interface):
    its ports are reached through the daemon like any other sandbox's, and the daemon's own port
    there is the sandbox's, where nothing listens (502), never the daemon."""
    d = network_daemon
    r = api(d, "POST", "/sandboxes", json={"templateID": "python3", "allow_internet_access": True})
    assert r.status_code == 201, r.text
    sandbox_id, domain = r.json()["sandboxID"], r.json()["domain"]
    headers = {"E2B-Traffic-Access-Token": d.token}
    try:
        r = requests.get(f"{d.origin}/api/kernelspecs", timeout=30,
                         headers={**headers, "Host": f"{d.port}-{sandbox_id}.{domain}"})
        assert r.status_code == 502, r.text
        assert "kernelspecs" not in r.text
        assert execute(d, sandbox_id, START.format(source=ECHO_SERVER, port=9000)) == "listening\n"
        r = requests.get(f"{d.origin}/page.txt", timeout=30,
                         headers={**headers, "Host": f"9000-{sandbox_id}.{domain}"})
        assert r.status_code == 200 and r.text == "a page\n", r.text
    finally:
        api(d, "DELETE", f"/sandboxes/{sandbox_id}")


# Answers any Upgrade with 101 (protocol "x-echo"), then sends back every byte it receives.
RAW_UPGRADE_SERVER = r'''
import socket, sys, threading
def serve(c):
    head = b''
    while b'\r\n\r\n' not in head:
        head += c.recv(4096)
    c.sendall(b'HTTP/1.1 101 Switching Protocols\r\nUpgrade: x-echo\r\nConnection: Upgrade\r\n\r\n')
    while True:
        data = c.recv(65536)
        if not data:
            break
        c.sendall(data)
    c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', int(sys.argv[1])))
s.listen(8)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
'''


def upgrade_through(daemon, host):
    """A raw Upgrade to the sandbox host; the socket and the head of the answer."""
    sock = socket.create_connection((daemon.host, daemon.port), timeout=30)
    sock.sendall((f"GET /stream HTTP/1.1\r\nHost: {host}\r\nUpgrade: x-echo\r\n"
                  f"Connection: Upgrade\r\nE2B-Traffic-Access-Token: {daemon.token}\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        part = sock.recv(4096)
        assert part, f"closed after {head!r}"
        head += part
    return sock, head


def test_any_upgrade_is_a_tunnel_and_the_daemon_stops_cleanly_with_one_open():
    d = Daemon()
    d.start()
    try:
        r = api(d, "POST", "/sandboxes", json={"templateID": "python3"})
        assert r.status_code == 201, r.text
        sandbox_id = r.json()["sandboxID"]
        assert execute(d, sandbox_id, START.format(source=RAW_UPGRADE_SERVER, port=9100)) == "listening\n"
        sock, head = upgrade_through(d, f"9100-{sandbox_id}.localhost:{d.port}")
        assert head.startswith(b"HTTP/1.1 101"), head
        assert b"upgrade: x-echo" in head.lower()
        payload = os.urandom(300_000)
        sock.sendall(payload)
        back = b""
        while len(back) < len(payload):
            part = sock.recv(65536)
            assert part, f"closed after {len(back)} bytes"
            back += part
        assert back == payload
    finally:
        d.stop()  # with the tunnel still open
        log = d.log_text()
        d.remove_tmp()
    assert not any(marker in log for marker in SANITIZER_MARKERS), log[-4000:]
    assert "stopped" in log


def test_a_sandbox_has_at_most_64_exchanges_open(daemon):
    """Tunnels count while they are open: the 65th is 429 naming the limit; once one closes, a
    new one is let in (the count drops when the daemon sees the close: bounded retries)."""
    r = api(daemon, "POST", "/sandboxes", json={"templateID": "python3"})
    assert r.status_code == 201, r.text
    sandbox_id = r.json()["sandboxID"]
    host = f"9100-{sandbox_id}.localhost:{daemon.port}"
    sockets = []
    try:
        assert execute(daemon, sandbox_id, START.format(source=RAW_UPGRADE_SERVER, port=9100)) == "listening\n"
        for _ in range(64):
            sock, head = upgrade_through(daemon, host)
            sockets.append(sock)
            assert head.startswith(b"HTTP/1.1 101"), head
        refused = requests.get(f"{daemon.origin}/", timeout=30,
                               headers={"Host": host, "E2B-Traffic-Access-Token": daemon.token})
        assert refused.status_code == 429 and refused.json()["code"] == 429
        assert "64 requests to its ports open" in refused.json()["message"]
        assert refused.headers["Retry-After"] == "1"
        # another sandbox's ports are not held back by this one's
        assert requests.get(f"{daemon.origin}/", timeout=30, headers={
            "Host": f"9100-00000000-0000-4000-8000-000000000000.localhost:{daemon.port}",
            "E2B-Traffic-Access-Token": daemon.token}).status_code == 502
        sockets.pop().close()
        for attempt in range(100):
            sock, head = upgrade_through(daemon, host)
            sockets.append(sock)
            if head.startswith(b"HTTP/1.1 101"):
                break
            assert b" 429 " in head.split(b"\r\n")[0], head
            sockets.pop().close()
            time.sleep(0.05)
        assert head.startswith(b"HTTP/1.1 101"), head
    finally:
        for sock in sockets:
            sock.close()
        api(daemon, "DELETE", f"/sandboxes/{sandbox_id}")
