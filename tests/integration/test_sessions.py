"""/api/sessions: the legacy session model {id, path, name, type, kernel}."""
import uuid

import pytest

from helpers.asserts import assert_error, assert_kernel_model
from helpers.wait import wait_until


def new_session(cb, path="work/a.ipynb", type_="notebook", name="a.ipynb", kernel=None):
    body = {"path": path, "type": type_, "name": name, "kernel": kernel or {"name": "python3"}}
    r = cb.post("api/sessions", json=body)
    assert r.status_code == 201, r.text
    model = r.json()
    cb._kernels.append(model["kernel"]["id"])
    return model


def assert_session_model(model):
    assert {"id", "path", "name", "type", "kernel"} <= set(model), model
    uuid.UUID(model["id"])
    assert_kernel_model(model["kernel"])


def test_create_session_model(cb):
    model = new_session(cb)
    assert_session_model(model)
    assert model["path"] == "work/a.ipynb"
    assert model["name"] == "a.ipynb"
    assert model["type"] == "notebook"
    assert cb.kernel_exists(model["kernel"]["id"])


def test_create_session_without_kernel_uses_default(cb):
    r = cb.post("api/sessions", json={"path": "b.py", "type": "console"})
    assert r.status_code == 201, r.text
    model = r.json()
    cb._kernels.append(model["kernel"]["id"])
    assert_session_model(model)
    assert model["kernel"]["name"] == "python3"


@pytest.mark.parametrize("body", [{"type": "notebook"}, {"path": "x.ipynb"}, {}])
def test_create_session_missing_path_or_type_400(cb, body):
    assert_error(cb.post("api/sessions", json=body), 400, "Bad Request")


def test_create_session_malformed_json_400(cb):
    r = cb.post("api/sessions", data=b'{"path": ', headers={"Content-Type": "application/json"})
    assert_error(r, 400, "Bad Request")


def test_list_and_get_session(cb):
    a = new_session(cb, path="a.ipynb")
    b = new_session(cb, path="b.ipynb", name="b")
    r = cb.get("api/sessions")
    assert r.status_code == 200
    listed = {s["id"]: s for s in r.json()}
    assert a["id"] in listed and b["id"] in listed
    for s in listed.values():
        assert_session_model(s)
    r = cb.get(f"api/sessions/{a['id']}")
    assert r.status_code == 200
    assert r.json()["id"] == a["id"]
    assert r.json()["path"] == "a.ipynb"
    assert r.json()["kernel"]["id"] == a["kernel"]["id"]


def test_get_unknown_session_404(cb):
    assert_error(cb.get(f"api/sessions/{uuid.uuid4()}"), 404, "Not Found")


def test_patch_session_path_and_name(cb):
    s = new_session(cb, path="old.ipynb", name="old")
    r = cb.patch(f"api/sessions/{s['id']}", json={"path": "new.ipynb", "name": "new"})
    assert r.status_code == 200, r.text
    assert r.json()["path"] == "new.ipynb"
    assert r.json()["name"] == "new"
    assert r.json()["kernel"]["id"] == s["kernel"]["id"]
    got = cb.get(f"api/sessions/{s['id']}").json()
    assert got["path"] == "new.ipynb" and got["name"] == "new"


def test_patch_unknown_session_404(cb):
    assert_error(cb.patch(f"api/sessions/{uuid.uuid4()}", json={"path": "x"}), 404, "Not Found")


def test_delete_session_204_and_its_kernel_goes(cb):
    s = new_session(cb)
    r = cb.delete(f"api/sessions/{s['id']}")
    assert r.status_code == 204
    assert_error(cb.get(f"api/sessions/{s['id']}"), 404, "Not Found")
    assert s["id"] not in {x["id"] for x in cb.get("api/sessions").json()}
    # Jupyter Server and Kernel Gateway shut the session's kernel down with it
    wait_until(lambda: not cb.kernel_exists(s["kernel"]["id"]), timeout=30,
               message="the session's kernel to be deleted")


def test_delete_unknown_session_404(cb):
    assert_error(cb.delete(f"api/sessions/{uuid.uuid4()}"), 404, "Not Found")


def test_session_kernel_executes(cb):
    s = new_session(cb)
    with cb.ready_ws(s["kernel"]["id"], session_id=s["id"]) as ws:
        r = ws.execute("6*7")
        assert r.result_data()["text/plain"] == "42"


def test_session_disappears_with_its_kernel(cb):
    s = new_session(cb)
    cb.delete_kernel(s["kernel"]["id"])
    wait_until(lambda: s["id"] not in {x["id"] for x in cb.get("api/sessions").json()}, timeout=30,
               message="the session of a deleted kernel to leave the list")
