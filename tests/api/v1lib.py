"""A small client for cellboxd's native API (/v1) and a checker of responses against
docs/openapi.yaml, shared by tests/api.

V1(daemon, spec=None)
    .get/.post/.put/.delete(path, **requests kwargs)   path relative to the base url ("v1/...")
    .create(**body) -> sandbox model (201 asserted); deleted by .cleanup()
    .execute(sid, code, **body) -> Events (the whole NDJSON stream, read line by line)
    .command(sid, cmd, **body) -> Events (a foreground command's stream)
    .stream(method, path, json=...) -> (response, iterator of decoded lines)
With a Spec, every response is checked against the schema the document declares for its
path, method, status and content type, and every NDJSON line against the stream's line schema;
what was exercised is recorded in spec.seen for the coverage check.
"""
import contextlib
import copy
import json
import os
import re
import time
import urllib.parse

import yaml
from jsonschema import Draft202012Validator

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OPENAPI = os.environ.get("CELLBOX_OPENAPI") or os.path.join(REPO, "docs", "openapi.yaml")
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
TIMEOUT = 60


def assert_error(r, status, *words):
    """An error answer: the status, a JSON {"reason", "message"} body, and the message naming
    each of `words` (case-insensitive)."""
    assert r.status_code == status, f"{r.request.method} {r.url} -> {r.status_code} {r.text[:400]}"
    ctype = r.headers.get("Content-Type", "")
    assert ctype.startswith("application/json"), (ctype, r.text[:200])
    body = r.json()
    assert isinstance(body.get("reason"), str) and body["reason"], body
    assert isinstance(body.get("message"), str) and body["message"], body
    for w in words:
        assert str(w).lower() in body["message"].lower(), f"message does not name {w!r}: {body}"
    return body


def expect(r, status):
    assert r.status_code == status, f"{r.request.method} {r.url} -> {r.status_code} {r.text[:600]}"
    return r


# ---------------------------------------------------------------------------- the document

class Spec:
    """docs/openapi.yaml, with path matching and response validation."""

    def __init__(self, path=OPENAPI, soft=False):
        with open(path) as f:
            self.doc = yaml.safe_load(f)
        # soft: mismatches are collected in .problems (the caller reports them) instead of
        # raised at once, so that one wrong field does not hide the rest of a run
        self.soft = soft
        self.problems = []
        self.seen = set()            # (path template, method, status)
        self.lines_checked = 0
        self.bodies_checked = 0
        self._validators = {}
        self._routes = []
        for template in self.doc.get("paths", {}):
            literal = len([s for s in template.split("/") if s and not s.startswith("{")])
            rx = "^" + re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)) + "$"
            self._routes.append((literal, template, re.compile(rx)))
        self._routes.sort(key=lambda t: -t[0])

    # -- structure
    def operations(self):
        for template, item in self.doc["paths"].items():
            for method in METHODS:
                if method in item:
                    yield template, method, item[method]

    def resolve(self, ref):
        assert ref.startswith("#/"), f"only local $refs are used here: {ref}"
        node = self.doc
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            assert isinstance(node, dict) and part in node, f"$ref {ref} does not resolve (at {part!r})"
            node = node[part]
        return node

    def deref(self, node):
        seen = 0
        while isinstance(node, dict) and "$ref" in node and seen < 20:
            node = self.resolve(node["$ref"])
            seen += 1
        return node

    def all_refs(self):
        found = []

        def walk(o, where):
            if isinstance(o, dict):
                for k, v in o.items():
                    if k == "$ref" and isinstance(v, str):
                        found.append((where, v))
                    else:
                        walk(v, f"{where}/{k}")
            elif isinstance(o, list):
                for i, v in enumerate(o):
                    walk(v, f"{where}[{i}]")

        walk(self.doc, "#")
        return found

    # -- matching
    def match(self, path):
        for _, template, rx in self._routes:
            if rx.match(path):
                return template
        return None

    def validator(self, schema):
        key = json.dumps(schema, sort_keys=True)
        v = self._validators.get(key)
        if v is None:
            # The schema is checked as the root of a document that also holds the components,
            # so "#/components/schemas/..." resolves (with any jsonschema version).
            root = dict(copy.deepcopy(schema))
            root["components"] = self.doc["components"]
            v = self._validators[key] = Draft202012Validator(root)
        return v

    def fail(self, message):
        if self.soft:
            self.problems.append(message)
        else:
            raise AssertionError(message)

    def check(self, instance, schema, what):
        errors = sorted(self.validator(schema).iter_errors(instance), key=lambda e: list(e.path))
        if errors:
            detail = "\n".join(f"  at {'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message[:300]}"
                               for e in errors[:8])
            self.fail(f"{what} does not match docs/openapi.yaml:\n{detail}\n"
                      f"instance: {json.dumps(instance)[:1000]}")
            return False
        return True

    def response_decl(self, method, url_path, status):
        template = self.match(url_path)
        assert template, f"{method.upper()} {url_path}: no path of docs/openapi.yaml matches"
        op = self.doc["paths"][template].get(method.lower())
        assert op is not None, f"{method.upper()} {template} is not in docs/openapi.yaml"
        responses = op.get("responses", {})
        decl = responses.get(str(status)) or responses.get(f"{str(status)[0]}XX") or responses.get("default")
        assert decl is not None, (f"{method.upper()} {template} answered {status}, which docs/openapi.yaml "
                                  f"does not declare (declared: {sorted(responses)})")
        return template, self.deref(decl)

    def check_response(self, r, streamed):
        """Check one response (its body unless `streamed`); record it as exercised."""
        method = r.request.method.lower()
        url_path = urllib.parse.urlsplit(r.url).path
        try:
            template, decl = self.response_decl(method, url_path, r.status_code)
        except AssertionError as e:
            self.fail(f"{e} (body: {r.text[:300] if not streamed else '...'})")
            return None
        self.seen.add((template, method, r.status_code))
        ctype = r.headers.get("Content-Type", "").split(";")[0].strip()
        content = decl.get("content") or {}
        what = f"{method.upper()} {url_path} -> {r.status_code}"
        if not content:
            if r.content:
                self.fail(f"{what}: no body is declared, got {r.content[:200]!r}")
            return template
        if ctype not in content:
            self.fail(f"{what}: Content-Type {ctype!r}, declared {sorted(content)}")
            return template
        schema = content[ctype].get("schema")
        if ctype == "application/json" and schema is not None:
            self.check(r.json(), schema, what)
            self.bodies_checked += 1
        return template

    def line_schema(self, method, url_path, status):
        _, decl = self.response_decl(method, url_path, status)
        return (decl.get("content") or {})["application/x-ndjson"]["schema"]


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

class V1:
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
        kw.setdefault("allow_redirects", False)
        r = self.http.request(method, self.url(path), stream=stream, **kw)
        if self.spec is not None:
            ctype = r.headers.get("Content-Type", "")
            # a JSON body is small: read it even from a streamed request
            self.spec.check_response(r, streamed=stream and "json" not in ctype)
        return r

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, **kw):
        return self.request("POST", path, **kw)

    def put(self, path, **kw):
        return self.request("PUT", path, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)

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
                self.http.delete(self.url(f"v1/sandboxes/{sid}"), timeout=30)
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


# ---------------------------------------------------------------------------- raw uploads

def raw_upload(host, port, path, headers, total, chunked, byte=b"\0", chunk=1 << 16, timeout=120):
    """Send a PUT of `total` bytes (Content-Length, or chunked transfer encoding), stopping as
    soon as the server answers. Returns (status, headers, body) of the answer."""
    import select
    import socket

    hdrs = {"Host": f"{host}:{port}", "Connection": "close", "Content-Type": "application/octet-stream"}
    hdrs.update(headers)
    if chunked:
        hdrs["Transfer-Encoding"] = "chunked"
    else:
        hdrs["Content-Length"] = str(total)
    head = f"PUT {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()) + "\r\n"
    sock = socket.create_connection((host, port), timeout=timeout)
    received = b""
    try:
        sock.sendall(head.encode("latin-1"))
        sent = 0
        block = byte * chunk
        deadline = time.monotonic() + timeout
        finished = False
        while time.monotonic() < deadline:
            readable, writable, _ = select.select([sock], [sock], [], 1.0)
            if readable:
                break
            if not writable:
                continue
            try:
                if sent < total:
                    n = min(chunk, total - sent)
                    piece = (f"{n:x}\r\n".encode() + block[:n] + b"\r\n") if chunked else block[:n]
                    sock.sendall(piece)
                    sent += n
                elif not finished:
                    if chunked:
                        sock.sendall(b"0\r\n\r\n")
                    finished = True
                else:
                    break
            except (BrokenPipeError, ConnectionResetError):
                break
        sock.settimeout(timeout)
        while b"\r\n\r\n" not in received or not _complete(received):
            try:
                data = sock.recv(65536)
            except (ConnectionResetError, socket.timeout):
                data = b""
            if not data:
                break
            received += data
    finally:
        with contextlib.suppress(OSError):
            sock.close()
    assert b"\r\n\r\n" in received, f"no answer to PUT {path} ({received[:200]!r})"
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    hd = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            hd[k.strip().lower()] = v.strip()
    return status, hd, body


def _complete(received):
    head, _, body = received.partition(b"\r\n\r\n")
    m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    return m is not None and len(body) >= int(m.group(1))
