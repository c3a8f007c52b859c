"""A client for cellboxd's native API (/v1), for every suite that speaks it.

V1(daemon, spec=None)
    .get/.post/.put/.delete(path, **requests kwargs)   path relative to the base url ("v1/...")
    .create(**body) -> sandbox model (201 asserted); deleted by .cleanup()
    .execute(sid, code, **body) -> Events (the whole NDJSON stream, read line by line)
    .command(sid, cmd, **body) -> Events (a foreground command's stream)
    .stream(method, path, json=...) -> (response, iterator of decoded lines)
    .client: the daemon's plain Client (helpers/client.py), for requests nothing checks
spec: an object with check_response(r, streamed), line_schema(method, path, status) and
check(instance, schema, what) (tests/api/openapi_spec.py's Spec): every response and every NDJSON
line then goes through it.
"""
import contextlib
import json
import time
import urllib.parse

from .client import HttpVerbs

TIMEOUT = 60  # seconds for one request or one whole stream


# ---------------------------------------------------------------------------- streams

class Events(list):
    """The decoded lines of an NDJSON stream."""

    status = None
    response = None

    @property
    def types(self):
        return [e.get("type") for e in self]

    def of(self, t):
        return [e for e in self if e.get("type") == t]

    def one(self, t):
        found = self.of(t)
        assert len(found) == 1, f"expected one {t!r} event, got {self.types}: {self!r}"[:3000]
        return found[0]

    def text(self, t):
        return "".join(e.get("text", "") for e in self.of(t))

    @property
    def stdout(self):
        return self.text("stdout")

    @property
    def stderr(self):
        return self.text("stderr")

    @property
    def results(self):
        return self.of("result")

    @property
    def main_result(self):
        mains = [e for e in self.results if e.get("is_main_result")]
        assert len(mains) == 1, f"expected one main result: {self!r}"[:3000]
        return mains[0]

    @property
    def errors(self):
        return self.of("error")

    def __repr__(self):
        return "Events(" + json.dumps(list(self))[:3000] + ")"


def read_lines(r, timeout=TIMEOUT):
    """Yield the decoded JSON lines of a streamed response as they arrive (no buffering beyond
    what is available: http.client's read1, which also undoes chunked encoding)."""
    fp = getattr(r.raw, "_fp", None)
    buf = b""
    deadline = time.monotonic() + timeout
    while True:
        if time.monotonic() > deadline:
            raise AssertionError(f"stream not finished after {timeout}s; pending {buf[:200]!r}")
        if fp is not None and hasattr(fp, "read1"):
            chunk = fp.read1(65536)
        else:
            chunk = r.raw.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                yield json.loads(line)
    if buf.strip():
        yield json.loads(buf)


# ---------------------------------------------------------------------------- client

class V1(HttpVerbs):
    """/v1 requests to one daemon (its token, its base url); remembers the sandboxes it made."""

    def __init__(self, daemon, spec=None):
        self.daemon = daemon
        self.client = daemon.client()
        self.http = self.client.http
        self.spec = spec
        self.created = []

    def url(self, path):
        return self.client.url(path)

    def request(self, method, path, stream=False, **kw):
        kw.setdefault("timeout", TIMEOUT)
        r = self.client.request(method, path, stream=stream, **kw)
        if self.spec is not None:
            ctype = r.headers.get("Content-Type", "")
            # a JSON body is small: read it even from a streamed request
            self.spec.check_response(r, streamed=stream and "json" not in ctype)
        return r

    # -- sandboxes
    def create(self, **body):
        r = self.post("v1/sandboxes", json=body)
        assert r.status_code == 201, f"POST /v1/sandboxes {body} -> {r.status_code} {r.text[:500]}"
        model = r.json()
        self.created.append(model["id"])
        return model

    def model(self, sid, **kw):
        r = self.get(f"v1/sandboxes/{sid}", **kw)
        assert r.status_code == 200, f"GET sandbox -> {r.status_code} {r.text[:300]}"
        return r.json()

    def sandboxes(self, **params):
        r = self.get("v1/sandboxes", params=params)
        assert r.status_code == 200, f"GET /v1/sandboxes -> {r.status_code} {r.text[:300]}"
        return r.json()

    def remove(self, sid):
        r = self.delete(f"v1/sandboxes/{sid}", timeout=30)
        with contextlib.suppress(ValueError):
            self.created.remove(sid)
        return r

    def cleanup(self):
        for sid in list(self.created):
            with contextlib.suppress(Exception):
                self.client.delete(f"v1/sandboxes/{sid}", timeout=30)
        self.created.clear()

    # -- streams
    def stream(self, method, path, timeout=TIMEOUT, **kw):
        """(response, line iterator); each line is checked against the document."""
        r = self.request(method, path, stream=True, timeout=timeout, **kw)
        schema = None
        if self.spec is not None and r.status_code == 200:
            with contextlib.suppress(AssertionError, KeyError):
                schema = self.spec.line_schema(method.lower(), urllib.parse.urlsplit(r.url).path, 200)

        def lines():
            for i, obj in enumerate(read_lines(r, timeout=timeout)):
                if schema is not None:
                    self.spec.check(obj, schema, f"{method} {path} line {i}")
                    self.spec.lines_checked += 1
                yield obj

        return r, lines()

    def _collect(self, method, path, timeout, **kw):
        r, lines = self.stream(method, path, timeout=timeout, **kw)
        ev = Events()
        ev.status = r.status_code
        ev.response = r
        if r.status_code != 200:
            ev.body = r.json() if "json" in r.headers.get("Content-Type", "") else r.text
            r.close()
            return ev
        assert r.headers.get("Content-Type", "").startswith("application/x-ndjson"), r.headers
        try:
            for obj in lines:
                ev.append(obj)
        finally:
            r.close()
        return ev

    def execute(self, sid, code, timeout=TIMEOUT, params=None, expect_status=200, **body):
        body["code"] = code
        ev = self._collect("POST", f"v1/sandboxes/{sid}/execute", timeout, json=body, params=params)
        if expect_status is not None:
            assert ev.status == expect_status, f"execute -> {ev.status} {getattr(ev, 'body', '')}"
        if ev.status == 200:
            assert ev and ev[-1].get("type") == "end_of_execution", f"stream not ended by end_of_execution: {ev!r}"
            assert ev.types.count("end_of_execution") == 1, ev.types
        return ev

    def command(self, sid, cmd, timeout=TIMEOUT, params=None, expect_status=200, **body):
        body["cmd"] = cmd
        ev = self._collect("POST", f"v1/sandboxes/{sid}/commands", timeout, json=body, params=params)
        if expect_status is not None:
            assert ev.status == expect_status, f"command -> {ev.status} {getattr(ev, 'body', '')}"
        if ev.status == 200:
            assert ev and ev[0].get("type") == "start", ev
            assert ev[-1].get("type") == "exit", ev
        return ev

    def background(self, sid, cmd, **body):
        body.update(cmd=cmd, background=True)
        r = self.post(f"v1/sandboxes/{sid}/commands", json=body)
        assert r.status_code == 201, f"background command -> {r.status_code} {r.text[:300]}"
        return r.json()

    def value(self, sid, code, **kw):
        """Execute and return the main result's text (asserting no error)."""
        ev = self.execute(sid, code, **kw)
        assert not ev.errors, ev.errors
        return ev.main_result.get("text")

    # -- files
    def files_url(self, sid, sub=""):
        return f"v1/sandboxes/{sid}/files" + (f"/{sub}" if sub else "")

    def write(self, sid, path, data, **kw):
        if isinstance(data, str):
            data = data.encode()
        r = self.put(self.files_url(sid), params={"path": path}, data=data, **kw)
        assert r.status_code in (200, 201), f"PUT {path} -> {r.status_code} {r.text[:300]}"
        return r.json()

    def read(self, sid, path):
        r = self.get(self.files_url(sid), params={"path": path})
        assert r.status_code == 200, f"GET {path} -> {r.status_code} {r.text[:300]}"
        return r.content
