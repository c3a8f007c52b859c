"""What the API answers, as small objects: an execution and its results (the shapes of E2B's
code interpreter SDK), contexts, file entries, commands, sandboxes and stateless runs.

Timestamps are kept as the daemon's ISO 8601 strings ("2026-11-22T17:00:00.000000Z").
"""
import base64
import json as _json
import re
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Optional

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def strip_ansi(text):
    """Text without terminal colour codes (IPython colours its tracebacks)."""
    return _ANSI.sub("", text or "")


def _known(cls, data):
    """The items of `data` that are fields of the dataclass `cls`."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


class OutputMessage(str):
    """One chunk of stdout or stderr, as the callbacks receive it: the text itself (a str),
    plus `.timestamp` (ISO 8601, from the daemon) and `.error` (True for stderr)."""

    timestamp: Optional[str]
    error: bool

    def __new__(cls, text, timestamp=None, error=False):
        self = super().__new__(cls, text)
        self.timestamp = timestamp
        self.error = error
        return self

    @property
    def line(self):
        return str(self)


# ----------------------------------------------------------------------------- execution

_RESULT_FORMATS = ("text", "html", "markdown", "svg", "png", "jpeg", "pdf", "latex", "json",
                   "javascript", "data", "chart")


@dataclass
class Result:
    """One rich result of a cell: the value of its last expression (`is_main_result`) or
    something it displayed (a chart, a DataFrame). Each field is one MIME type of the bundle;
    `png`, `jpeg` and `pdf` are base64 text; other MIME types are in `extra`."""

    text: Optional[str] = None
    html: Optional[str] = None
    markdown: Optional[str] = None
    svg: Optional[str] = None
    png: Optional[str] = None
    jpeg: Optional[str] = None
    pdf: Optional[str] = None
    latex: Optional[str] = None
    json: Optional[Any] = None
    javascript: Optional[str] = None
    data: Optional[Any] = None
    chart: Optional[Any] = None
    extra: Dict[str, Any] = field(default_factory=dict)
    is_main_result: bool = False

    @classmethod
    def from_event(cls, event):
        return cls(**_known(cls, {k: v for k, v in event.items() if k != "type"}))

    def formats(self):
        """The formats this result has, e.g. ["text", "png"]; then the `extra` MIME types."""
        found = [name for name in _RESULT_FORMATS if getattr(self, name) is not None]
        return found + list(self.extra or {})

    def _bytes(self, name):
        value = getattr(self, name)
        if value is None:
            raise ValueError(f"this result has no {name} (its formats: {self.formats()})")
        return base64.b64decode(value)

    def png_bytes(self):
        return self._bytes("png")

    def save_png(self, path):
        """Write the PNG to `path`; returns the path."""
        return self._save(path, self._bytes("png"))

    def save_jpeg(self, path):
        return self._save(path, self._bytes("jpeg"))

    def save_pdf(self, path):
        return self._save(path, self._bytes("pdf"))

    def save_svg(self, path):
        if self.svg is None:
            raise ValueError(f"this result has no svg (its formats: {self.formats()})")
        return self._save(path, self.svg.encode())

    def save_html(self, path):
        if self.html is None:
            raise ValueError(f"this result has no html (its formats: {self.formats()})")
        return self._save(path, self.html.encode())

    @staticmethod
    def _save(path, data):
        with open(path, "wb") as f:
            f.write(data)
        return path

    def __str__(self):
        return self.text or ""

    # Jupyter shows a Result as what it is
    def _repr_html_(self):
        return self.html

    def _repr_markdown_(self):
        return self.markdown

    def _repr_svg_(self):
        return self.svg

    def _repr_png_(self):
        return self.png

    def _repr_jpeg_(self):
        return self.jpeg

    def _repr_latex_(self):
        return self.latex

    def _repr_json_(self):
        return self.json

    def _repr_javascript_(self):
        return self.javascript


@dataclass
class Logs:
    """What a cell printed, chunk by chunk as it arrived."""

    stdout: List[str] = field(default_factory=list)
    stderr: List[str] = field(default_factory=list)


@dataclass
class ExecutionError:
    """The exception a cell raised: `name` ("ZeroDivisionError"), `value` ("division by zero")
    and IPython's `traceback` (one string, with colour codes; `traceback_text` has none)."""

    name: str
    value: str
    traceback: str = ""

    @property
    def traceback_text(self):
        return strip_ansi(self.traceback)

    def __str__(self):
        return f"{self.name}: {self.value}"

    def to_json(self):
        return _json.dumps({"name": self.name, "value": self.value, "traceback": self.traceback})


@dataclass
class Accounting:
    """What one execution cost, measured by the daemon."""

    wall_ms: int = 0
    cpu_ms: int = 0
    memory_peak_bytes: int = 0
    output_bytes: int = 0
    truncated: bool = False
    timed_out: bool = False


@dataclass
class Execution:
    """The outcome of run_code: results, printed output, the error if the cell raised, the
    kernel's execution count and the accounting."""

    results: List[Result] = field(default_factory=list)
    logs: Logs = field(default_factory=Logs)
    error: Optional[ExecutionError] = None
    execution_count: Optional[int] = None
    accounting: Optional[Accounting] = None

    @property
    def text(self):
        """The text of the main result (the value of the cell's last expression), or None."""
        for result in self.results:
            if result.is_main_result:
                return result.text
        return None

    @property
    def stdout(self):
        return "".join(self.logs.stdout)

    @property
    def stderr(self):
        return "".join(self.logs.stderr)

    def to_json(self):
        results = [{k: v for k, v in vars(r).items() if v is not None and v != {}} for r in self.results]
        return _json.dumps({
            "results": results,
            "logs": vars(self.logs),
            "error": vars(self.error) if self.error else None,
            "execution_count": self.execution_count,
            "accounting": vars(self.accounting) if self.accounting else None,
        })


# ----------------------------------------------------------------------------- sandboxes

@dataclass
class Context:
    """A Python kernel of a sandbox. The default context's id is the sandbox's id."""

    id: str
    language: str = "python"
    cwd: str = "/workspace"
    default: bool = False
    state: Optional[str] = None

    @classmethod
    def from_model(cls, model):
        return cls(**_known(cls, model))


@dataclass
class SandboxInfo:
    """A sandbox model: `state` is "running", "paused", "hibernated" (kept only as the snapshot
    `snapshot_id`, its memory freed; its next call wakes it) or "dead" (`reason` says why);
    `ends_at` is None when it never expires or while it is paused. `restore`, on the answer of
    a restore or a wake, says how each context came back."""

    id: str
    template: Optional[str] = None
    state: Optional[str] = None
    started_at: Optional[str] = None
    ends_at: Optional[str] = None
    timeout_s: Optional[int] = None
    metadata: Dict[str, str] = field(default_factory=dict)
    limits: Dict[str, Any] = field(default_factory=dict)
    usage: Dict[str, Any] = field(default_factory=dict)
    contexts: List[Context] = field(default_factory=list)
    reason: Optional[str] = None
    snapshot_id: Optional[str] = None
    restore: Optional[Dict[str, Any]] = None

    @classmethod
    def from_model(cls, model):
        values = _known(cls, model)
        values["contexts"] = [Context.from_model(c) for c in model.get("contexts") or []]
        return cls(**values)

    @property
    def sandbox_id(self):
        return self.id


@dataclass
class SnapshotInfo:
    """A snapshot on the daemon's disk: the sandbox it was taken of, when, its size in bytes
    ({"memory", "files", "namespace"}) and how each context is kept: `contexts` holds
    {"context_id", "language", "carried": "process" | "python" | "restarted", "report"}."""

    snapshot_id: str
    sandbox_id: Optional[str] = None
    name: Optional[str] = None
    created_at: Optional[str] = None
    metadata: Dict[str, str] = field(default_factory=dict)
    template: Optional[str] = None
    bytes: Dict[str, int] = field(default_factory=dict)
    contexts: List[Dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_model(cls, model):
        return cls(**_known(cls, model))

    @property
    def id(self):
        return self.snapshot_id


@dataclass
class EntryInfo:
    """A file-system entry inside the sandbox: `path` is absolute there; `type` is "file",
    "dir", "symlink" or "other"; `mode` is octal text ("0644")."""

    name: str
    path: str
    type: str
    size: int = 0
    mode: Optional[str] = None
    modified_at: Optional[str] = None
    symlink_target: Optional[str] = None

    @classmethod
    def from_model(cls, model):
        return cls(**_known(cls, model))


@dataclass
class CommandResult:
    """A finished (or, from CommandHandle.output(), a running) command: `exit_code` is None
    while it runs; 124 with `timed_out` when its timeout killed it; `signal` names the signal
    that ended it."""

    exit_code: Optional[int]
    stdout: str = ""
    stderr: str = ""
    signal: Optional[str] = None
    timed_out: bool = False
    wall_ms: Optional[int] = None
    id: Optional[str] = None
    pid: Optional[int] = None

    @property
    def ok(self):
        return self.exit_code == 0

    @property
    def error(self):
        """stderr when the command failed, else None (as E2B's CommandResult.error)."""
        return self.stderr if self.exit_code not in (0, None) else None


@dataclass
class CommandInfo:
    """A command model: `state` is "running" or "exited"."""

    id: str
    pid: Optional[int] = None
    cmd: Optional[str] = None
    cwd: Optional[str] = None
    state: Optional[str] = None
    exit_code: Optional[int] = None
    signal: Optional[str] = None
    timed_out: bool = False
    started_at: Optional[str] = None
    ended_at: Optional[str] = None
    wall_ms: Optional[int] = None
    stdout: Optional[str] = None
    stderr: Optional[str] = None

    @classmethod
    def from_model(cls, model):
        return cls(**_known(cls, model))

    def result(self):
        return CommandResult(exit_code=self.exit_code, stdout=self.stdout or "", stderr=self.stderr or "",
                             signal=self.signal, timed_out=bool(self.timed_out), wall_ms=self.wall_ms,
                             id=self.id, pid=self.pid)


@dataclass
class RunResult:
    """The outcome of a stateless run (cellbox.run): `status` is "ok", "error" or "timeout";
    `output` interleaves stdout and stderr; `files` maps each fetched path to its bytes."""

    status: str
    exit_code: int
    output: str = ""
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    truncated: bool = False
    blocks: List[Dict[str, Any]] = field(default_factory=list)
    files: Dict[str, bytes] = field(default_factory=dict)
    accounting: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_model(cls, model):
        values = _known(cls, model)
        values["files"] = {path: base64.b64decode(data) for path, data in (model.get("files") or {}).items()}
        return cls(**values)

    @property
    def ok(self):
        return self.status == "ok"
