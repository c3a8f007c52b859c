"""E2B's `Volume` class and `volumeMounts` (npm `e2b`, unchanged) against cellboxd (issue 20,
part G): tests/clients/node/e2b_volumes.mjs drives the SDK and reports each step; every step's
details are checked here. A cellbox volume's ID is its name; E2B's volume content API reaches a
volume's files outside any sandbox.

The npm packages come from `scripts/install-deps.sh test` (npm ci in tests/clients/node)."""
import os

import pytest

from helpers.node_clients import assert_every_step_passed, run_e2b_script

pytestmark = pytest.mark.cellbox_only  # Jupyter Server has no E2B API

TIMEOUT = 180
NAME = "sdk-data"


def test_volume_scenario(daemon):
    proc, steps, detail = run_e2b_script(daemon, "e2b_volumes.mjs", TIMEOUT,
                                         env={"E2B_VOLUME_API_URL": daemon.origin, "CELLBOX_VOLUME_NAME": NAME})
    expected = ["create", "list_info_connect", "mount_two", "share", "destroy_refused_while_mounted",
                "content", "outlives_sandboxes", "destroy"]
    assert_every_step_passed(proc, steps, detail, expected)

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
