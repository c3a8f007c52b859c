"""E2B's `Volume` class and `volumeMounts` (npm `e2b`, unchanged) against cellboxd (issue 20,
part G): tests/clients/node/e2b_volumes.mjs drives the SDK and reports each step; every step's
details are checked here. A cellbox volume's ID is its name; E2B's volume content API reaches a
volume's files outside any sandbox.

The npm packages come from `scripts/install-deps.sh test` (npm ci in tests/clients/node)."""
import json
import os
import shutil
import subprocess

import pytest

pytestmark = pytest.mark.cellbox_only  # Jupyter Server has no E2B API

NODE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node")
TIMEOUT = 180
NAME = "sdk-data"


def run_volumes_client(daemon, timeout=TIMEOUT):
    node = shutil.which("node")
    assert node, "node is not installed (scripts/install-deps.sh test installs it)"
    assert os.path.isdir(os.path.join(NODE_DIR, "node_modules", "e2b")), \
        "npm packages missing: run `scripts/install-deps.sh test` (npm ci in tests/clients/node)"
    env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
    env.update(E2B_API_URL=daemon.origin, E2B_SANDBOX_URL=daemon.origin,
               E2B_VOLUME_API_URL=daemon.origin, E2B_API_KEY=daemon.token,
               CELLBOX_VOLUME_NAME=NAME, CELLBOX_CLIENT_DEADLINE_MS=str((timeout - 20) * 1000))
    proc = subprocess.run([node, "e2b_volumes.mjs"], cwd=NODE_DIR, env=env, capture_output=True,
                          text=True, timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no summary from the client (exit {proc.returncode})\nstderr:\n{proc.stderr[-4000:]}"
    return proc, json.loads(lines[-1])


def test_volume_scenario(daemon):
    proc, summary = run_volumes_client(daemon)
    steps = summary["steps"]
    detail = f"exit {proc.returncode}\nsummary: {json.dumps(summary, indent=1)}\nstderr:\n{proc.stderr[-3000:]}"
    expected = ["create", "list_info_connect", "mount_two", "share", "destroy_refused_while_mounted",
                "content", "outlives_sandboxes", "destroy"]
    missing = [s for s in expected if s not in steps]
    assert not missing, f"steps never reported: {missing}\n{detail}"
    failed = {name: s for name, s in steps.items() if not s["ok"]}
    assert not failed, f"failed steps: {failed}\n{detail}"
    assert proc.returncode == 0, detail

    assert steps["create"] == {"ok": True, "volume_id": NAME, "name": NAME, "has_token": True}

    found = steps["list_info_connect"]
    assert {"volumeId": NAME, "name": NAME} in found["listed"], found
    assert found["info"] == found["connected"] == {"volumeId": NAME, "name": NAME}, found
    assert found["missing_is_not_found"] is True, found
    assert found["duplicate"]["isVolumeError"] and "already exists" in found["duplicate"]["message"], found

    mounts = steps["mount_two"]
    assert mounts["first_mounts"] == [{"name": NAME, "path": "/mnt/data"}], mounts
    assert mounts["second_mounts"] == [{"name": NAME, "path": "/data/shared"}], mounts

    share = steps["share"]
    assert share["seen"] == "from the first sandbox\n", share
    assert share["appended_stdout"] == ["['hello.txt']\n"], share
    assert share["back"] == "from the first sandbox\nand the second\n", share
    assert share["listed"] == ["hello.txt"], share

    refused = steps["destroy_refused_while_mounted"]
    assert refused["refused"]["isVolumeError"], refused
    assert "is mounted by sandbox" in refused["refused"]["message"], refused
    assert refused["still_listed"] is True, refused

    content = steps["content"]
    assert content["made"] == {"name": "docs", "type": "directory", "path": "/docs"}, content
    assert content["written"] == {"name": "a.txt", "type": "file", "size": 12, "mode": 0o644}, content
    assert content["text"] == "hello volume" and content["byte_length"] == 12, content
    assert content["fromSandbox"] == "from the first sandbox\nand the second\n", content
    assert content["top"] == ["docs", "notes"], content
    assert content["deep"] == ["/docs", "/docs/a.txt", "/notes", "/notes/hello.txt"], content
    assert content["info"] == {"type": "file", "size": 12, "mode": 0o644, "mtime_is_date": True}, content
    assert content["chmod_mode"] == 0o600, content
    assert content["seenInSandbox"] == "hello volume", content
    assert content["exists"] == [True, False], content
    assert content["missing_is_path_not_found"] is True, content
    assert content["owner"]["isVolumeError"], content
    assert "not supported by cellbox: uid and gid" in content["owner"]["message"], content
    assert content["again"]["isVolumeError"] and "already exists" in content["again"]["message"], content
    assert content["escape"]["name"] == "VolumePathNotFoundError", content
    assert content["removed"] is False, content

    assert steps["outlives_sandboxes"]["text"] == "from the first sandbox\nand the second\n"

    gone = steps["destroy"]
    assert gone["destroyed"] is True and gone["again"] is False, gone
    assert gone["gone_is_not_found"] is True, gone
    assert f"volume {NAME} does not exist" in gone["mount_missing"]["message"], gone

    # nothing of the volume is left in the data directory
    folder = os.path.join(daemon.data_dir, "named-volumes")
    assert not [f for f in os.listdir(folder) if f.startswith("volume-")], os.listdir(folder)
