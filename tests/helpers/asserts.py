"""Assertions shared by the suites."""
import datetime
import os
import re
import uuid

# Against the reference Jupyter Server (CELLBOX_TEST_REFERENCE) some details differ from
# Kernel Gateway's (e.g. its JSON errors carry "reason": null); those checks are relaxed there.
REFERENCE = os.environ.get("CELLBOX_TEST_REFERENCE", "")

LAST_ACTIVITY_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")
KERNEL_MODEL_KEYS = {"id", "name", "last_activity", "execution_state", "connections"}
HEADER_KEYS = {"msg_id", "session", "username", "date", "msg_type", "version"}
DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def assert_error(r, status, reason):
    """A KG JSON error: status, Content-Type application/json, {"reason", "message"}."""
    assert r.status_code == status, f"{r.request.method} {r.url} -> {r.status_code} {r.text[:300]}"
    assert r.headers.get("Content-Type", "").startswith("application/json"), (r.headers, r.text[:200])
    body = r.json()
    if not REFERENCE:
        assert body.get("reason") == reason, body
    assert isinstance(body.get("message"), str), body
    return body


def assert_v1_error(r, status, *words):
    """An error answer of the native API (/v1): the status, a JSON {"reason", "message"} body,
    and the message naming each of `words` (case-insensitive)."""
    assert r.status_code == status, f"{r.request.method} {r.url} -> {r.status_code} {r.text[:400]}"
    ctype = r.headers.get("Content-Type", "")
    assert ctype.startswith("application/json"), (ctype, r.text[:200])
    body = r.json()
    assert isinstance(body.get("reason"), str) and body["reason"], body
    assert isinstance(body.get("message"), str) and body["message"], body
    for w in words:
        assert str(w).lower() in body["message"].lower(), f"message does not name {w!r}: {body}"
    return body


def expect(r, status):
    """The response, once its status is `status` (else the failure shows its body)."""
    assert r.status_code == status, f"{r.request.method} {r.url} -> {r.status_code} {r.text[:600]}"
    return r


def assert_kernel_model(model, name="python3"):
    assert KERNEL_MODEL_KEYS <= set(model), model
    assert str(uuid.UUID(model["id"])) == model["id"], model["id"]
    assert uuid.UUID(model["id"]).version == 4, model["id"]
    assert model["name"] == name
    assert model["execution_state"] in ("starting", "idle", "busy", "dead", "restarting"), model
    assert type(model["connections"]) is int, model
    assert LAST_ACTIVITY_RE.match(model["last_activity"]), model["last_activity"]
    # What Jupyter Server's GatewayClient does with it:
    datetime.datetime.strptime(model["last_activity"], "%Y-%m-%dT%H:%M:%S.%fZ")


def assert_header(header, msg_type=None):
    assert HEADER_KEYS <= set(header), header
    if msg_type:
        assert header["msg_type"] == msg_type, header
    assert isinstance(header["msg_id"], str) and header["msg_id"]
    assert header["version"].startswith("5."), header
    assert DATE_RE.match(header["date"]), header["date"]
