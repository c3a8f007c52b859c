"""Named volumes: disks of a fixed size that outlive sandboxes and mount into several at once.

    from cellbox import Sandbox, Volume

    Volume.create("data", size="1G")
    with Sandbox.create(volumes={"data": "/mnt/data"}) as sb:
        sb.files.write("/mnt/data/results.csv", "a,b\\n1,2\\n")
    Volume.get("data")["used_bytes"]; Volume.list(); Volume.delete("data")

Each answer is the daemon's volume model: {"name", "size_bytes", "used_bytes", "created_at",
"sandboxes" (those that mount it now), "mounted"}. Deleting one that a sandbox mounts raises
ConflictError naming the sandboxes, unless force=True (they keep it until they end)."""
import urllib.parse

from ._transport import DEFAULT_REQUEST_TIMEOUT, Connection


class Volume:
    """The verbs of /v1/volumes; every one takes url=, token= and request_timeout= as Sandbox."""

    @staticmethod
    def create(name, size=None, url=None, token=None, request_timeout=DEFAULT_REQUEST_TIMEOUT):
        """A new volume; size like "512M" or "4G", or bytes (default 1 GiB)."""
        body = {"name": name}
        if size is not None:
            body["size"] = size
        return Connection(url, token, request_timeout).call("POST", "v1/volumes", json_body=body)

    @staticmethod
    def list(url=None, token=None, request_timeout=DEFAULT_REQUEST_TIMEOUT):
        return Connection(url, token, request_timeout).call("GET", "v1/volumes")

    @staticmethod
    def get(name, url=None, token=None, request_timeout=DEFAULT_REQUEST_TIMEOUT):
        return Connection(url, token, request_timeout).call("GET", _path(name))

    @staticmethod
    def delete(name, force=False, url=None, token=None, request_timeout=DEFAULT_REQUEST_TIMEOUT):
        Connection(url, token, request_timeout).call("DELETE", _path(name),
                                                     query={"force": True} if force else None)


def _path(name):
    return "v1/volumes/" + urllib.parse.quote(name, safe="")
