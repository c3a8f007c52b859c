"""Sandbox.create(volumes={"name": "/path"}) mounts named volumes (issue 20, part G): what one
sandbox writes there, the next one reads, after the first is gone."""
import requests

import cellbox
from cellbox import Sandbox


def test_sandboxes_share_a_named_volume(daemon, conn):
    api = f"{daemon.origin}/v1/volumes"
    headers = {"Authorization": f"token {daemon.token}"}
    r = requests.post(api, json={"name": "pyclient-vol", "size": "16M"}, headers=headers, timeout=30)
    assert r.status_code == 201, r.text
    try:
        with Sandbox.create(timeout_s=0, volumes={"pyclient-vol": "/mnt/shared"}, **conn) as first:
            first.files.write("/mnt/shared/from-first.txt", "kept")
        with Sandbox.create(timeout_s=0, volumes={"pyclient-vol": "/data"}, **conn) as second:
            assert second.files.read("/data/from-first.txt") == b"kept"
            assert second.run_code("open('/data/from-first.txt').read()").text == "'kept'"
        try:
            Sandbox.create(timeout_s=0, volumes={"no-such-volume": "/mnt/x"}, **conn)
            raise AssertionError("a sandbox was made with a volume that does not exist")
        except cellbox.CellboxError as e:
            assert "no-such-volume does not exist" in str(e), e
    finally:
        requests.delete(f"{api}/pyclient-vol", params={"force": "true"}, headers=headers, timeout=30)
