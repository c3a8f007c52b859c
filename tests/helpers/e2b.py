"""E2B's HTTP routes on a daemon a test started, as E2B's SDKs call them.

api() is the control plane (sandboxes, volumes: the X-API-Key header); into() and
into_envd() reach a port inside a sandbox through cellboxd, routed by the E2b-Sandbox-Id and
E2b-Sandbox-Port headers (api/e2b.c); made_sandbox() gives a fixture a sandbox it then kills.
Every request is bounded by a 60 s timeout."""
import contextlib

import requests

ENVD_PORT = "49983"  # envd's port inside an E2B sandbox: /files, /health and Connect-RPC


def api(daemon, method, path, key=None, **kw):
    """A control-plane request with the daemon's token (or `key`) as the API key."""
    headers = kw.pop("headers", {})
    headers.setdefault("X-API-Key", daemon.token if key is None else key)
    return requests.request(method, daemon.origin + path, headers=headers, timeout=60, **kw)


def into(daemon, sandbox_id, port, method, path, token=None, header="X-Access-Token", **kw):
    """A request to `port` inside a sandbox, carrying the daemon's token (or `token`) in `header`."""
    headers = {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": port,
               header: daemon.token if token is None else token}
    headers.update(kw.pop("headers", {}))
    return requests.request(method, daemon.origin + path, headers=headers, timeout=60, **kw)


def into_envd(daemon, sandbox, method, path, token=None, **kw):
    """A request to envd in `sandbox` (a create answer: sandboxID, envdAccessToken) with that
    sandbox's own access token, or `token`."""
    return into(daemon, sandbox["sandboxID"], ENVD_PORT, method, path,
                token=sandbox["envdAccessToken"] if token is None else token, **kw)


@contextlib.contextmanager
def made_sandbox(daemon, path="/sandboxes", **body):
    """A sandbox made by E2B's create (POST `path` with `body` as JSON): the create answer, the
    sandbox killed when the block ends."""
    r = api(daemon, "POST", path, json=body)
    assert r.status_code == 201, r.text
    created = r.json()
    try:
        yield created
    finally:
        api(daemon, "DELETE", f"/sandboxes/{created['sandboxID']}")
