"""E2B's snapshots and forks (npm `e2b`, unchanged) against cellboxd (issue 24):
tests/clients/node/e2b_snapshots.mjs drives the SDK's createSnapshot, listSnapshots,
Sandbox.create(snapshotId), fork (instance and static) and deleteSnapshot, and a hibernated
sandbox woken by a call into it and by Sandbox.connect, reporting each step; every step's
details are checked here: the state of the moment a snapshot was taken comes back in a new
sandbox, forks diverge from each other and from their source, a hibernated sandbox is paused to
E2B and keeps its state, and each refusal is the SDK error it documents.

The npm packages come from `scripts/install-deps.sh test` (npm ci in tests/clients/node)."""
import pytest
import requests

from helpers.node_clients import assert_every_step_passed, run_e2b_script
from helpers.wait import wait_until

pytestmark = pytest.mark.cellbox_only  # Jupyter Server has no E2B API

TIMEOUT = 220


def wait_for_zygote(daemon):
    """A snapshot or a fork images a zygote's clone: the sandboxes here start once the daemon's
    zygote is ready (one made before is a plain process, which cannot be imaged)."""
    client = daemon.client()
    wait_until(lambda: client.get("api").json()["zygote_ready"], timeout=120, message="the zygote")


def test_snapshot_scenario(daemon):
    wait_for_zygote(daemon)
    proc, steps, detail = run_e2b_script(daemon, "e2b_snapshots.mjs", TIMEOUT)
    expected = ["create_snapshot", "list_snapshots", "create_from_snapshot", "fork", "fork_errors",
                "delete_snapshot", "hibernated"]
    assert_every_step_passed(proc, steps, detail, expected)

    taken = steps["create_snapshot"]
    assert taken["snapshot"]["names"] == ["sdk-snap"], taken
    assert taken["snapshot"]["snapshotId"] and taken["distinct"], taken
    first, second = taken["snapshot"]["snapshotId"], taken["second"]["snapshotId"]

    listed = steps["list_snapshots"]
    assert {first, second} <= set(listed["all"]), listed
    assert set(listed["own"]) == {first, second}, listed
    assert listed["by_name"] == [{"snapshotId": first, "names": ["sdk-snap"]}], listed
    assert listed["other"] == [], listed
    pages = listed["pages"]
    assert len(pages["first"]) == 1 and pages["had_next"] is True, pages
    assert len(pages["second"]) == 1 and pages["has_next"] is False, pages
    assert set(pages["first"] + pages["second"]) == {first, second}, pages

    restored = steps["create_from_snapshot"]
    assert restored["distinct"] and restored["running"], restored
    assert restored["kept"] == "{'a': [1, 2]}" and restored["note"] == "before", restored
    assert restored["source_kept"] is None, restored  # `kept = None` there: no value
    assert restored["source_note"] == "after", restored  # the source went on, untouched

    fork = steps["fork"]
    assert fork["count"] == 2 and fork["all_sandboxes"] and fork["ids_distinct"], fork
    assert (fork["one"], fork["two"], fork["source"]) == ("11", "10", "10"), fork
    assert fork["two_note"] == fork["source_note"] == "after", fork
    assert fork["single"] == {"count": 1, "is_sandbox": True, "counter": "10"}, fork

    errors = steps["fork_errors"]
    assert errors["missing"]["name"] == "SandboxNotFoundError", errors
    assert errors["too_many"] and "1 to 16" in errors["too_many"]["message"], errors

    deleted = steps["delete_snapshot"]
    assert deleted["deleted"] is True and deleted["again"] is False, deleted
    assert deleted["listed"] == [second] and deleted["second_deleted"] is True, deleted
    assert deleted["create_gone"] and "does not exist" in deleted["create_gone"]["message"], deleted

    asleep = steps["hibernated"]
    assert asleep["statuses"] == [200, 200] and asleep["state"] == "paused", asleep
    assert asleep["woken"] == "3" and asleep["after_connect"] == "running", asleep
    assert asleep["connected_value"] == "3", asleep


def test_a_sandboxs_own_token_neither_snapshots_nor_forks(daemon):
    """A sandbox's envd access token (which code inside it may learn) opens its own envd only:
    the snapshot and fork routes of the control plane refuse it, and nothing is made."""
    wait_for_zygote(daemon)
    key = {"X-API-Key": daemon.token}
    created = requests.post(daemon.origin + "/sandboxes", json={"timeout": 60}, headers=key, timeout=60)
    assert created.status_code == 201, created.text
    sid, own = created.json()["sandboxID"], created.json()["envdAccessToken"]
    sandboxes = lambda: {s["sandboxID"] for s in
                         requests.get(daemon.origin + "/v2/sandboxes", headers=key, timeout=60).json()}
    before = sandboxes()
    try:
        as_sandbox = [{"X-API-Key": own}, {"X-Access-Token": own}]
        for headers in as_sandbox:
            for method, path, body in (("POST", f"/sandboxes/{sid}/snapshots", {}),
                                       ("POST", f"/sandboxes/{sid}/fork", {"count": 2}),
                                       ("GET", "/snapshots", None)):
                r = requests.request(method, daemon.origin + path, json=body, headers=headers, timeout=60)
                assert r.status_code == 401, f"{method} {path} with {list(headers)}: {r.status_code} {r.text}"
        assert sandboxes() == before, "a refused fork made a sandbox"
        assert requests.get(daemon.origin + "/snapshots", params={"sandboxID": sid}, headers=key,
                            timeout=60).json() == []
    finally:
        requests.delete(f"{daemon.origin}/sandboxes/{sid}", headers=key, timeout=60)
