"""Snapshots: a sandbox's live state (every context's interpreter, its files, its settings) kept
on the daemon's disk, and the sandboxes made from it.

    from cellbox import Sandbox, Snapshot

    sb = Sandbox.create()
    sb.run_code("import pandas as pd; df = pd.DataFrame({'x': [1, 2, 3]})")
    snap = sb.snapshot(name="before-cleanup")     # a SnapshotInfo; sb goes on running
    sb.run_code("del df")
    back = Snapshot.restore(snap.id)              # a new Sandbox, `df` in it again
    Snapshot.restore(snap.id, into=sb.id)         # or sb itself rewound (same id)
    Snapshot.list(sandbox_id=sb.id); Snapshot.delete(snap.id)

Forks need no snapshot: sb.fork(count=3) answers three new sandboxes, each a copy of sb's
live state and files. sb.hibernate() keeps sb only as a snapshot (its memory freed); its next
call wakes it."""
import json
import urllib.parse

from . import errors
from ._transport import DEFAULT_REQUEST_TIMEOUT, Connection
from .models import SnapshotInfo


class Snapshot:
    """The verbs of /v1/snapshots; every one takes url=, token= and request_timeout= as
    Sandbox does."""

    @staticmethod
    def list(sandbox_id=None, url=None, token=None, request_timeout=DEFAULT_REQUEST_TIMEOUT):
        """Every snapshot on the daemon as SnapshotInfo, or only those of `sandbox_id`."""
        connection = Connection(url, token, request_timeout)
        models = connection.call("GET", "v1/snapshots", query={"sandbox_id": sandbox_id})
        return [SnapshotInfo.from_model(m) for m in models]

    @staticmethod
    def get(snapshot_id, url=None, token=None, request_timeout=DEFAULT_REQUEST_TIMEOUT):
        """One snapshot (NotFoundError if there is none with this id)."""
        connection = Connection(url, token, request_timeout)
        return SnapshotInfo.from_model(connection.call("GET", _path(snapshot_id)))

    @staticmethod
    def restore(snapshot_id, into=None, timeout_s=None, metadata=None, env=None, url=None,
                token=None, request_timeout=DEFAULT_REQUEST_TIMEOUT, auto_resume=False):
        """A Sandbox from the snapshot: a new one, or with `into` (the snapshot's own sandbox,
        still there) that sandbox rewound in place, its id kept. The sandbox's info().restore
        says how each context came back ("process", "python": its namespace, name by name, or
        "restarted"). ForbiddenError when the snapshot was changed outside cellbox."""
        from .sandbox import Sandbox  # sandbox.py imports this module
        connection = Connection(url, token, request_timeout)
        body = {}
        for name, value in (("sandbox_id", into), ("timeout", timeout_s), ("metadata", metadata),
                            ("env", env)):
            if value is not None:
                body[name] = value
        model = connection.call("POST", _path(snapshot_id) + "/restore", json_body=body)
        sandbox = Sandbox(model["id"], connection=connection, auto_resume=auto_resume)
        sandbox.restore_report = model.get("restore")
        return sandbox

    @staticmethod
    def delete(snapshot_id, url=None, token=None, request_timeout=DEFAULT_REQUEST_TIMEOUT):
        """Remove a snapshot from the daemon's disk. False if there was none; ConflictError
        while a hibernated sandbox still needs it."""
        try:
            Connection(url, token, request_timeout).call("DELETE", _path(snapshot_id))
            return True
        except errors.NotFoundError:
            return False


def fork_results(entries, connection, auto_resume):
    """POST .../fork's answer, one entry per fork, as Sandbox objects and, for a fork that did
    not start, the CellboxError its status names (in the same place)."""
    from .sandbox import Sandbox
    results = []
    for entry in entries:
        if "sandbox" in entry:
            results.append(Sandbox(entry["sandbox"]["id"], connection=connection,
                                   auto_resume=auto_resume))
        else:
            error = entry.get("error") or {}
            body = json.dumps({"message": error.get("message") or "the fork did not start"})
            results.append(errors.error_from_response(int(error.get("status") or 500),
                                                      body.encode(), "POST", "fork"))
    return results


def _path(snapshot_id):
    return "v1/snapshots/" + urllib.parse.quote(snapshot_id, safe="")
