"""Sandbox: one isolated environment on a cellboxd, holding Python kernels ("contexts"), files
and processes. The synchronous client; cellbox.aio wraps it for asyncio.

    with Sandbox.create() as sb:               # deleted when the block ends
        sb.run_code("x = 1 + 2")
        print(sb.run_code("x").text)           # "3": state is kept between calls
"""
import urllib.parse

from . import errors
from ._transport import DEFAULT_REQUEST_TIMEOUT, Connection
from .commands import Commands
from .files import Files
from .models import (Accounting, Context, Execution, ExecutionError, OutputMessage, Result,
                     SandboxInfo, SnapshotInfo)
from .snapshots import fork_results

DEFAULT_TIMEOUT_S = 300   # a sandbox lives 5 minutes unless told otherwise (E2B's default)
_STREAM_IDLE_S = 60       # the execution stream sends a keepalive every 5 s of quiet


def _quote(part):
    return urllib.parse.quote(str(part), safe="")


def _context_id(context):
    if context is None or isinstance(context, str):
        return context
    return context.id


class Sandbox:
    """A sandbox on cellboxd. Make one with Sandbox.create(), or reach an existing one with
    Sandbox.connect(id). `files` and `commands` work on its file system and processes.

    url and token default to $CELLBOX_URL / $CELLBOX_TOKEN, then http://127.0.0.1:8888 and
    .cellbox/token. With auto_resume=True every call resumes the sandbox if it is paused
    (otherwise such calls raise SandboxPausedError)."""

    def __init__(self, sandbox_id, *, url=None, token=None, request_timeout=DEFAULT_REQUEST_TIMEOUT,
                 auto_resume=False, connection=None):
        self.id = sandbox_id
        self.connection = connection or Connection(url, token, request_timeout)
        self.auto_resume = auto_resume
        self.files = Files(self)
        self.commands = Commands(self)
        self.restore_report = None  # a restored sandbox's per-context report (Snapshot.restore)

    def __repr__(self):
        return f"Sandbox({self.id!r}, url={self.connection.url!r})"

    @property
    def sandbox_id(self):
        return self.id

    # -- lifecycle --------------------------------------------------------------------------

    @classmethod
    def create(cls, template=None, timeout_s=DEFAULT_TIMEOUT_S, env=None, metadata=None, limits=None,
               network=None, url=None, token=None, request_timeout=DEFAULT_REQUEST_TIMEOUT,
               auto_resume=False, volumes=None):
        """Create a sandbox and return it once it is ready. timeout_s: seconds it lives
        (0 = until killed); env: environment of every context and command; metadata: string
        labels to find it by (Sandbox.list(metadata=...)); limits: {"memory": "512M", "pids",
        "cpus", "disk", "open_files", "timeout" (per cell), "output"}; network: ask for
        network access (the daemon must allow it); volumes: named volumes to mount,
        {"name": "/mnt/data"} (made with POST /v1/volumes or `cellbox volume create`)."""
        connection = Connection(url, token, request_timeout)
        body = {"timeout_s": timeout_s}
        for name, value in (("template", template), ("env", env), ("metadata", metadata),
                            ("limits", limits), ("network", network), ("volumes", volumes)):
            if value is not None:
                body[name] = value
        model = connection.call("POST", "v1/sandboxes", json_body=body)
        return cls(model["id"], connection=connection, auto_resume=auto_resume)

    @classmethod
    def connect(cls, sandbox_id, url=None, token=None, request_timeout=DEFAULT_REQUEST_TIMEOUT,
                auto_resume=False):
        """An existing sandbox (NotFoundError if there is none with this id)."""
        sandbox = cls(sandbox_id, url=url, token=token, request_timeout=request_timeout,
                      auto_resume=auto_resume)
        sandbox.info()
        return sandbox

    @classmethod
    def list(cls, state=None, metadata=None, url=None, token=None,
             request_timeout=DEFAULT_REQUEST_TIMEOUT):
        """The daemon's sandboxes as SandboxInfo, optionally only those in `state` ("running",
        "paused", "dead") and whose metadata has every key/value of `metadata`."""
        connection = Connection(url, token, request_timeout)
        query = {"state": state}
        for key, value in (metadata or {}).items():
            query[f"metadata.{key}"] = value
        return [SandboxInfo.from_model(m) for m in connection.call("GET", "v1/sandboxes", query=query)]

    def info(self):
        """The sandbox model now (state, TTL, limits, usage, contexts)."""
        return SandboxInfo.from_model(self._call("GET", ""))

    def is_running(self):
        try:
            return self.info().state == "running"
        except errors.NotFoundError:
            return False

    def kill(self):
        """Delete the sandbox: every process, its files and its kernels go. Returns False if
        it was already gone."""
        try:
            self._call("DELETE", "")
            return True
        except errors.NotFoundError:
            return False

    def pause(self):
        """Freeze every process (memory is kept, the TTL stops). Returns the model."""
        return SandboxInfo.from_model(self._call("POST", "pause"))

    def resume(self):
        """Thaw a paused sandbox, or wake a hibernated one from its snapshot; its TTL starts
        again from timeout_s. Returns the model."""
        return SandboxInfo.from_model(self._call("POST", "resume"))

    def set_timeout(self, timeout_s):
        """Expire `timeout_s` seconds from now (0 = never). Returns the model."""
        return SandboxInfo.from_model(self._call("POST", "timeout", json_body={"timeout_s": timeout_s}))

    # -- snapshots, forks, hibernation (cellbox.Snapshot holds the verbs of /v1/snapshots) --

    def snapshot(self, name=None, metadata=None):
        """Keep the sandbox's live state (every context's interpreter, its files) on the
        daemon's disk and return the SnapshotInfo; the sandbox goes on running. ConflictError
        while a cell runs or the sandbox is paused; InsufficientStorageError when the daemon's
        disk is full (nothing of the sandbox is lost)."""
        body = {}
        if name is not None:
            body["name"] = name
        if metadata is not None:
            body["metadata"] = metadata
        return SnapshotInfo.from_model(self._call("POST", "snapshots", json_body=body))

    def fork(self, count=1, timeout_s=None, metadata=None):
        """`count` (1 to 16) new sandboxes, each a copy of this one's live state and files,
        isolated from it and from each other. One entry per fork: a Sandbox, or the
        CellboxError that kept that fork from starting."""
        body = {"count": count}
        if timeout_s is not None:
            body["timeout"] = timeout_s
        if metadata is not None:
            body["metadata"] = metadata
        return fork_results(self._call("POST", "fork", json_body=body), self.connection,
                            self.auto_resume)

    def hibernate(self):
        """Keep the sandbox only as a snapshot on disk and free its memory; state becomes
        "hibernated" (also across daemon restarts). resume(), or any call that needs it,
        wakes it. Returns the model."""
        return SandboxInfo.from_model(self._call("POST", "hibernate"))

    def get_logs(self, limit=200):
        """The sandbox's recent log entries, oldest first: dicts with timestamp, source
        ("execute", "command", "sandbox"), stream ("stdout", "stderr", "event") and text."""
        return self._call("GET", "logs", query={"limit": limit})

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()

    # -- code -------------------------------------------------------------------------------

    def run_code(self, code, context=None, language=None, env_vars=None, timeout_s=None,
                 on_stdout=None, on_stderr=None, on_result=None, on_error=None, _cancel=None):
        """Run a cell in a context (default: the sandbox's default context) and return its
        Execution. The callbacks are called as the stream arrives: on_stdout/on_stderr with
        each chunk (an OutputMessage, a str), on_result with each Result, on_error with the
        ExecutionError. env_vars hold for this cell only; timeout_s interrupts it (the error
        is then named "TimeoutError"). An exception from a callback (or Ctrl-C) closes the
        stream, which interrupts the cell, and is raised. (_cancel: a threading.Event that
        cellbox.aio sets to abandon the cell; it is looked at on every line, keepalives
        included, so within 5 s.)"""
        # As E2B's SDK: `traceback` keeps IPython's colours (`traceback_text` has none); /v1
        # takes them out unless asked.
        body = {"code": code, "color": True}
        if context is not None:
            body["context_id"] = _context_id(context)
        for name, value in (("language", language), ("env_vars", env_vars), ("timeout_s", timeout_s)):
            if value is not None:
                body[name] = value
        execution = Execution()
        ended = False
        idle = max(_STREAM_IDLE_S, self.connection.request_timeout or 0)
        stream = self._stream("POST", "execute", body, timeout=idle)
        try:
            for event in stream:
                if _cancel is not None and _cancel.is_set():
                    raise errors.CellboxError("run_code cancelled: the cell was interrupted")
                kind = event.get("type")
                if kind in ("stdout", "stderr"):
                    message = OutputMessage(event.get("text", ""), event.get("timestamp"), kind == "stderr")
                    getattr(execution.logs, kind).append(str(message))
                    callback = on_stdout if kind == "stdout" else on_stderr
                    if callback:
                        callback(message)
                elif kind == "result":
                    result = Result.from_event(event)
                    execution.results.append(result)
                    if on_result:
                        on_result(result)
                elif kind == "error":
                    execution.error = ExecutionError(event.get("name", ""), event.get("value", ""),
                                                     event.get("traceback", ""))
                    if on_error:
                        on_error(execution.error)
                elif kind == "number_of_executions":
                    execution.execution_count = event.get("execution_count")
                elif kind == "accounting":
                    execution.accounting = Accounting(**{k: v for k, v in event.items()
                                                         if k in Accounting.__dataclass_fields__})
                elif kind == "end_of_execution":
                    ended = True
        finally:
            stream.close()  # at once, so that a failed callback interrupts the cell
        if not ended:
            raise errors.ConnectionError("the execution stream ended before end_of_execution "
                                         "(the daemon stopped or the connection broke)")
        return execution

    # -- contexts ---------------------------------------------------------------------------

    def create_context(self, cwd=None, language=None):
        """A new Python kernel in this sandbox (same files, processes and limits; its own
        state). cwd must be absolute (default /workspace)."""
        body = {}
        if cwd is not None:
            body["cwd"] = cwd
        if language is not None:
            body["language"] = language
        return Context.from_model(self._call("POST", "contexts", json_body=body))

    def list_contexts(self):
        """The sandbox's contexts, the default first."""
        return [Context.from_model(c) for c in self._call("GET", "contexts")]

    def restart_context(self, context):
        """Fresh state for a context. Restarting the default context restarts the whole
        sandbox (its processes and /tmp go; /workspace stays)."""
        return Context.from_model(self._call("POST", f"contexts/{_quote(_context_id(context))}/restart"))

    def remove_context(self, context):
        """Delete a context (not the default one: kill the sandbox instead)."""
        self._call("DELETE", f"contexts/{_quote(_context_id(context))}")

    # -- plumbing shared with Files and Commands ---------------------------------------------

    def _path(self, sub=""):
        path = f"v1/sandboxes/{_quote(self.id)}"
        return f"{path}/{sub}" if sub else path

    def _query(self, query=None):
        query = dict(query or {})
        if self.auto_resume:
            query["auto_resume"] = True
        return query

    def _call(self, method, sub, query=None, **kw):
        return self.connection.call(method, self._path(sub), self._query(query), **kw)

    def _stream(self, method, sub, body, timeout, query=None):
        return self.connection.stream(method, self._path(sub), self._query(query), json_body=body,
                                      timeout=timeout)
