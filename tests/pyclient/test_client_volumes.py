"""cellbox.Volume (create, list, get, delete) and Sandbox.create(volumes={"name": "/path"})
(issue 20, part G): what one sandbox writes in a volume, the next one reads, after the first is
gone; a volume in use is not deleted unless forced."""
import pytest

import cellbox
from cellbox import Sandbox, Volume


def test_volume_verbs(conn):
    model = Volume.create("pyclient-verbs", size="16M", **conn)
    assert model["name"] == "pyclient-verbs" and model["size_bytes"] == 16 << 20, model
    assert "pyclient-verbs" in [v["name"] for v in Volume.list(**conn)]
    with pytest.raises(cellbox.ConflictError):
        Volume.create("pyclient-verbs", **conn)
    with Sandbox.create(timeout_s=0, volumes={"pyclient-verbs": "/mnt/v"}, **conn) as sb:
        assert Volume.get("pyclient-verbs", **conn)["sandboxes"] == [sb.id]
        with pytest.raises(cellbox.ConflictError) as refused:
            Volume.delete("pyclient-verbs", **conn)
        assert sb.id in str(refused.value)
        Volume.delete("pyclient-verbs", force=True, **conn)
    with pytest.raises(cellbox.NotFoundError):
        Volume.get("pyclient-verbs", **conn)


def test_sandboxes_share_a_named_volume(conn):
    Volume.create("pyclient-vol", size="16M", **conn)
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
        Volume.delete("pyclient-vol", force=True, **conn)
