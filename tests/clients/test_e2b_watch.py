"""E2B's official SDK watching a sandbox's directory on cellboxd (tests/clients/node/e2b_watch.mjs),
unchanged: files.watchDir over envd's WatchDir (Connect server streaming, api/connect.c) sees
changes made by files.write/rename/remove, by runCode and by cellbox's /v1 files API, in a
subdirectory made later when recursive, with names relative to the watched directory;
handle.stop() ends it; watching a missing directory is the SDK's NotFoundError; the polling
watchers (CreateWatcher, GetWatcherEvents, RemoveWatcher) by raw Connect calls. Every step the
client reports is checked here again.

The npm packages come from `scripts/install-deps.sh test` (npm ci in tests/clients/node)."""
import json

import pytest

from helpers.node_clients import passed_step, run_node_script

pytestmark = pytest.mark.cellbox_only  # Jupyter Server has no E2B API

TIMEOUT = 150


@pytest.fixture(scope="module")
def watch_run(daemon):
    return run_node_script(daemon, "e2b_watch.mjs", TIMEOUT)


def step(watch_run, name):
    proc, summary = watch_run
    steps = summary["steps"]
    detail = f"exit {proc.returncode}\nsummary: {json.dumps(summary, indent=1)}\nstderr:\n{proc.stderr[-3000:]}"
    return passed_step(steps, detail, name)


def test_every_step_passed(watch_run):
    proc, summary = watch_run
    assert set(summary["steps"]) == {"create", "watch", "watch_missing", "polling", "kill"}, summary
    assert summary["ok"] and proc.returncode == 0, summary


def test_watch_dir_sees_changes_from_the_sdk_runcode_and_v1(watch_run):
    events = step(watch_run, "watch")["events"]
    for expected in ["create:sdk.txt", "write:sdk.txt", "create:code.txt", "write:code.txt",
                     "create:v1.txt", "write:v1.txt"]:
        assert expected in events, (expected, events)


def test_watch_dir_reports_rename_and_remove_in_order(watch_run):
    events = step(watch_run, "watch")["events"]
    # a rename is the old name's rename and the new name's create, as envd (fsnotify) reports it
    rename = events.index("rename:sdk.txt")
    assert events[rename + 1] == "create:renamed.txt", events
    assert events.index("remove:renamed.txt") > rename, events


def test_recursive_watch_follows_a_directory_made_after_it_started(watch_run):
    events = step(watch_run, "watch")["events"]
    assert events.index("create:sub") < events.index("create:sub/deep.txt"), events
    assert "write:sub/deep.txt" in events, events


def test_stop_ends_the_watch(watch_run):
    watch = step(watch_run, "watch")
    assert watch["after_stop"] == 0, watch
    assert not any("after-stop" in e for e in watch["events"]), watch
    assert watch["v1_status"] in (200, 201), watch


def test_watching_a_missing_directory_is_not_found(watch_run):
    missing = step(watch_run, "watch_missing")
    assert missing["error"] == "FileNotFoundError" and missing["not_found"] is True, missing


def test_polling_watcher_by_raw_connect_calls(watch_run):
    polling = step(watch_run, "polling")
    assert polling["created_status"] == 200 and polling["id_given"], polling
    assert polling["events"][0] == "EVENT_TYPE_CREATE:one.txt", polling
    assert "EVENT_TYPE_WRITE:one.txt" in polling["events"], polling
    assert polling["removed"] == {}, polling
    assert polling["after_status"] == 404 and polling["after_code"] == "not_found", polling
