"""A small client for cellboxd's Jupyter API: REST through requests, kernels' channels through
websocket-client, with either framing (see wire.py)."""
import contextlib
import json
import struct
import time
import urllib.parse
import uuid

import requests
import websocket

from . import wire

DEFAULT_TIMEOUT = 30.0  # seconds for one reply / one REST call; generous for ASan builds on 2 cores


class WSClosed(AssertionError):
    """The server closed the WebSocket (code is None when no close frame came)."""

    def __init__(self, code, reason=""):
        super().__init__(f"websocket closed by server: code={code} reason={reason!r}")
        self.code = code
        self.reason = reason


class ExecResult:
    """Everything one request produced: the messages whose parent is the request, in arrival order."""

    def __init__(self, request, messages):
        self.request = request
        self.messages = messages

    @property
    def msg_id(self):
        return self.request["header"]["msg_id"]

    def of_type(self, msg_type):
        return [m for m in self.messages if m["msg_type"] == msg_type]

    def first(self, msg_type):
        found = self.of_type(msg_type)
        assert found, f"no {msg_type} among {self.types}"
        return found[0]

    @property
    def types(self):
        return [m["msg_type"] for m in self.messages]

    @property
    def reply(self):
        replies = [m for m in self.messages if m["msg_type"].endswith("_reply")]
        assert len(replies) == 1, f"expected exactly one reply, got {self.types}"
        return replies[0]

    @property
    def iopub(self):
        return [m for m in self.messages if m.get("channel") == "iopub"]

    def stream(self, name="stdout"):
        return "".join(m["content"]["text"] for m in self.of_type("stream") if m["content"]["name"] == name)

    @property
    def stdout(self):
        return self.stream("stdout")

    @property
    def stderr(self):
        return self.stream("stderr")

    @property
    def statuses(self):
        return [m["content"]["execution_state"] for m in self.of_type("status")]

    def result_data(self):
        return self.first("execute_result")["content"]["data"]

    def __repr__(self):
        return f"<ExecResult {self.types}>"


class KernelWS:
    """One WebSocket to /api/kernels/{id}/channels.

    Messages received while waiting for something else are kept in an inbox, so that a test
    can wait for one message and still look at the others later.
    """

    def __init__(self, url, headers=None, subprotocols=None, session=None, timeout=DEFAULT_TIMEOUT,
                 suppress_origin=True):
        self.url = url
        self.session = session or uuid.uuid4().hex
        self.timeout = timeout
        self.ws = websocket.create_connection(
            url, header=headers or [], subprotocols=subprotocols, timeout=timeout,
            suppress_origin=suppress_origin, enable_multithread=False)
        self.subprotocol = self.ws.getsubprotocol()
        self.framing = "v1" if self.subprotocol == wire.V1_PROTOCOL else "legacy"
        self.inbox = []          # decoded messages not consumed yet
        self.log = []            # (monotonic time, decoded message) for everything received
        self.raw_frames = []     # (opcode, payload) for everything received
        self.close_code = None
        self.closed = False

    # ------------------------------------------------------------ sending
    def send(self, msg):
        if self.framing == "v1":
            self.ws.send_binary(wire.v1_encode(msg))
        else:
            payload, is_binary = wire.legacy_encode(msg)
            if is_binary:
                self.ws.send_binary(payload)
            else:
                self.ws.send(payload)
        return msg

    def send_text(self, text):
        self.ws.send(text)

    def send_bytes(self, data):
        self.ws.send_binary(data)

    def new(self, msg_type, content=None, channel="shell"):
        return wire.new_message(msg_type, content, session=self.session, channel=channel)

    # ------------------------------------------------------------ receiving
    def _recv_one(self, timeout):
        """Receive one data frame and decode it; None on timeout; WSClosed when closed."""
        if self.closed:
            raise WSClosed(self.close_code)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None  # pings/pongs alone must not keep us waiting past the deadline
            self.ws.settimeout(max(left, 0.001))
            try:
                opcode, frame = self.ws.recv_data_frame(True)
            except websocket.WebSocketTimeoutException:
                return None
            except (websocket.WebSocketConnectionClosedException, ConnectionError, OSError) as e:
                self.closed = True
                raise WSClosed(self.close_code, str(e)) from None
            if opcode == websocket.ABNF.OPCODE_CLOSE:
                self.closed = True
                data = frame.data or b""
                self.close_code = struct.unpack(">H", data[:2])[0] if len(data) >= 2 else None
                reason = data[2:].decode("utf-8", "replace")
                raise WSClosed(self.close_code, reason)
            if opcode in (websocket.ABNF.OPCODE_PING, websocket.ABNF.OPCODE_PONG):
                continue
            payload = frame.data if hasattr(frame, "data") else frame
            self.raw_frames.append((opcode, payload))
            if self.framing == "v1":
                if opcode != websocket.ABNF.OPCODE_BINARY:
                    raise wire.FramingError(f"v1 framing but the server sent opcode {opcode}: {payload[:200]!r}")
                msg = wire.v1_decode(payload)
            else:
                msg = wire.legacy_decode(payload, opcode == websocket.ABNF.OPCODE_BINARY)
            self.log.append((time.monotonic(), msg))
            return msg

    def recv(self, timeout=None):
        """The next message (from the inbox first); None when none arrives in time."""
        if self.inbox:
            return self.inbox.pop(0)
        return self._recv_one(self.timeout if timeout is None else timeout)

    def wait_for(self, predicate, timeout=None, what="a message"):
        """Return (and remove from the inbox) the first message satisfying predicate."""
        for i, m in enumerate(self.inbox):
            if predicate(m):
                return self.inbox.pop(i)
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out waiting for {what}; unconsumed: "
                                     f"{[(m.get('channel'), m.get('msg_type')) for m in self.inbox][-20:]}")
            m = self._recv_one(left)
            if m is None:
                continue
            if predicate(m):
                return m
            self.inbox.append(m)

    def drain(self, quiet=0.2):
        """Move everything that arrives within `quiet` seconds of silence into the inbox."""
        while True:
            m = self._recv_one(quiet)
            if m is None:
                return list(self.inbox)
            self.inbox.append(m)

    def wait_closed(self, timeout=None):
        """Wait until the server closes the connection; return the close code."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while time.monotonic() < deadline:
            try:
                m = self._recv_one(deadline - time.monotonic())
            except WSClosed as e:
                return e.code
            if m is not None:
                self.inbox.append(m)
        raise AssertionError("the server did not close the websocket in time")

    def collect(self, request, timeout=None, until_reply=True):
        """Collect every message whose parent is `request` until its reply and the idle (or
        dead) status, both, have arrived."""
        msg_id = request["header"]["msg_id"]
        got = []
        have_reply = have_idle = False
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)

        def mine(m):
            return (m.get("parent_header") or {}).get("msg_id") == msg_id

        while not (have_idle and (have_reply or not until_reply)):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out waiting for the end of {request['header']['msg_type']} "
                                     f"{msg_id}; got so far: {[m['msg_type'] for m in got]}")
            m = self.wait_for(mine, timeout=left, what=f"messages for {msg_id}")
            got.append(m)
            if m["msg_type"].endswith("_reply") and m.get("channel") != "iopub":
                have_reply = True
            # idle ends a request; so does dead (a kernel that dies never says idle)
            if m["msg_type"] == "status" and m["content"].get("execution_state") in ("idle", "dead"):
                have_idle = True
        return ExecResult(request, got)

    def request(self, msg_type, content=None, channel="shell", timeout=None):
        msg = self.send(self.new(msg_type, content, channel))
        return self.collect(msg, timeout=timeout)

    def execute(self, code, timeout=None, **kw):
        return self.request("execute_request", wire.execute_content(code, **kw), timeout=timeout)

    def send_execute(self, code, **kw):
        return self.send(self.new("execute_request", wire.execute_content(code, **kw)))

    def kernel_info(self, timeout=None):
        return self.request("kernel_info_request", {}, timeout=timeout)

    def close(self):
        with contextlib.suppress(Exception):
            self.ws.close(timeout=2)
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class HttpVerbs:
    """get/post/put/delete/patch(path, **requests kwargs) for a class with request(method, path)."""

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, **kw):
        return self.request("POST", path, **kw)

    def put(self, path, **kw):
        return self.request("PUT", path, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)

    def patch(self, path, **kw):
        return self.request("PATCH", path, **kw)


class Client(HttpVerbs):
    """REST + WebSocket client for one server (base url, token)."""

    def __init__(self, host, port, token, base_url="/"):
        self.host = host
        self.port = port
        self.token = token
        self.base_path = "/" + base_url.strip("/") + "/" if base_url.strip("/") else "/"
        self.base_url = f"http://{host}:{port}{self.base_path}"
        self.ws_base = f"ws://{host}:{port}{self.base_path}"
        self.http = requests.Session()
        if token is not None:
            self.http.headers["Authorization"] = f"token {token}"
        self._kernels = []

    # ------------------------------------------------------------ REST
    def url(self, path):
        return self.base_url + path.lstrip("/")

    def request(self, method, path, **kw):
        kw.setdefault("timeout", DEFAULT_TIMEOUT)
        kw.setdefault("allow_redirects", False)
        return self.http.request(method, self.url(path), **kw)

    def create_kernel(self, name=None, env=None, **extra):
        body = dict(extra)
        if name is not None:
            body["name"] = name
        if env is not None:
            body["env"] = env
        r = self.post("api/kernels", json=body)
        assert r.status_code == 201, f"POST /api/kernels -> {r.status_code} {r.text}"
        model = r.json()
        self._kernels.append(model["id"])
        return model

    def kernel_model(self, kernel_id):
        r = self.get(f"api/kernels/{kernel_id}")
        assert r.status_code == 200, f"GET kernel -> {r.status_code} {r.text}"
        return r.json()

    def delete_kernel(self, kernel_id, check=True):
        r = self.delete(f"api/kernels/{kernel_id}")
        if check:
            assert r.status_code == 204, f"DELETE kernel -> {r.status_code} {r.text}"
        return r

    def kernel_exists(self, kernel_id):
        return self.get(f"api/kernels/{kernel_id}").status_code == 200

    def cleanup(self):
        """Delete the kernels this client created (best effort)."""
        for kid in self._kernels:
            with contextlib.suppress(Exception):
                self.delete(f"api/kernels/{kid}", timeout=10)
        self._kernels.clear()

    @contextlib.contextmanager
    def kernel(self, **kw):
        model = self.create_kernel(**kw)
        try:
            yield model
        finally:
            with contextlib.suppress(Exception):
                self.delete(f"api/kernels/{model['id']}", timeout=10)

    # ------------------------------------------------------------ WebSocket
    def channels_url(self, kernel_id, session_id=None, token_in_query=False):
        url = f"{self.ws_base}api/kernels/{kernel_id}/channels"
        query = {}
        if session_id is not None:
            query["session_id"] = session_id
        if token_in_query:
            query["token"] = self.token
        if query:
            url += "?" + urllib.parse.urlencode(query)
        return url

    def ws(self, kernel_id, session_id=None, framing="legacy", auth="header", headers=None,
           subprotocols=None, timeout=DEFAULT_TIMEOUT):
        """Open the kernel's channels. framing: "legacy" (no subprotocol offered) or "v1".
        auth: "header", "query" or None. The client's message session is session_id when given."""
        hdrs = list(headers or [])
        if auth == "header" and self.token is not None:
            hdrs.append(f"Authorization: token {self.token}")
        if subprotocols is None and framing == "v1":
            subprotocols = [wire.V1_PROTOCOL]
        url = self.channels_url(kernel_id, session_id, token_in_query=(auth == "query"))
        conn = KernelWS(url, headers=hdrs, subprotocols=subprotocols, session=session_id, timeout=timeout)
        if framing == "v1":
            assert conn.subprotocol == wire.V1_PROTOCOL, f"server chose subprotocol {conn.subprotocol!r}"
        return conn

    def ready_ws(self, kernel_id, resend_every=None, **kw):
        """Open a WebSocket and wait for a kernel_info_reply, i.e. the kernel takes requests.

        resend_every: resend kernel_info_request every so many seconds until one is answered
        (JupyterLab's habit; needed through Jupyter Server 1.x's gateway proxy, which can drop
        a message sent before its own upstream connection is up)."""
        conn = self.ws(kernel_id, **kw)
        if resend_every is None:
            conn.kernel_info(timeout=60)
            return conn
        deadline = time.monotonic() + 60
        sent = []
        while True:
            sent.append(conn.send(conn.new("kernel_info_request"))["header"]["msg_id"])
            try:
                conn.wait_for(lambda m: m["msg_type"] == "kernel_info_reply"
                              and (m.get("parent_header") or {}).get("msg_id") in sent,
                              timeout=resend_every, what="kernel_info_reply")
                break
            except AssertionError:
                if time.monotonic() > deadline:
                    conn.close()
                    raise
        conn.drain(quiet=0.3)
        conn.inbox.clear()
        return conn


def pretty(obj):
    return json.dumps(obj, indent=1, default=repr)[:4000]
