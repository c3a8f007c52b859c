"""HTTP to cellboxd with the standard library: where the daemon is and its token, JSON
requests, error answers turned into exceptions, and NDJSON streams decoded line by line as the
bytes arrive (so callbacks fire while a cell is still running).

Each request opens its own connection (urllib), so one Connection may be used from several
threads at once.
"""
import http.client
import json
import os
import socket
import urllib.error
import urllib.parse
import urllib.request

from . import errors

DEFAULT_URL = "http://127.0.0.1:8888"
TOKEN_FILE = os.path.join(".cellbox", "token")  # written by `make run`
DEFAULT_REQUEST_TIMEOUT = 60.0                  # seconds without an answer (or a byte of a stream)

_DEFAULT = object()


def resolve_url(url=None):
    """`url`, else $CELLBOX_URL, else http://127.0.0.1:8888."""
    return url or os.environ.get("CELLBOX_URL") or DEFAULT_URL


def resolve_token(token=None):
    """`token`, else $CELLBOX_TOKEN, else the first line of .cellbox/token in the current
    directory or the nearest parent that has one, else None (no token is sent)."""
    if token is not None:
        return token
    if os.environ.get("CELLBOX_TOKEN") is not None:
        return os.environ["CELLBOX_TOKEN"]
    here = os.getcwd()
    while True:
        try:
            with open(os.path.join(here, TOKEN_FILE)) as f:
                line = f.readline().strip()
            if line:
                return line
        except OSError:
            pass
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def _query_value(value):
    if value is True:
        return "true"
    if value is False:
        return "false"
    return str(value)


_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
# A daemon on this machine is reached directly, whatever http_proxy says (urllib would send even
# 127.0.0.1 to the proxy unless no_proxy names it).
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Connection:
    """The daemon's base URL and token, and the requests made with them."""

    def __init__(self, url=None, token=None, request_timeout=DEFAULT_REQUEST_TIMEOUT):
        self.url = resolve_url(url).rstrip("/") + "/"
        self.token = resolve_token(token)
        self.request_timeout = request_timeout
        host = urllib.parse.urlsplit(self.url).hostname or ""
        self._urlopen = _DIRECT.open if host in _LOOPBACK or host.startswith("127.") else urllib.request.urlopen

    def __repr__(self):
        return f"Connection({self.url!r})"

    def endpoint(self, path, query=None):
        url = self.url + path.lstrip("/")
        if query:
            pairs = [(k, _query_value(v)) for k, v in query.items() if v is not None]
            if pairs:
                url += "?" + urllib.parse.urlencode(pairs)
        return url

    def open(self, method, path, query=None, json_body=_DEFAULT, data=None, headers=None,
             timeout=_DEFAULT):
        """Send one request and return the open response (a 2xx); raise the matching
        CellboxError otherwise. The caller reads and closes the response."""
        url = self.endpoint(path, query)
        all_headers = {"Accept": "application/json", "User-Agent": "cellbox-python/0.1"}
        if self.token:
            all_headers["Authorization"] = f"token {self.token}"
        if json_body is not _DEFAULT:
            data = json.dumps(json_body).encode()
            all_headers["Content-Type"] = "application/json"
        all_headers.update(headers or {})
        if data is None and method in ("POST", "PUT"):
            data = b""
        request = urllib.request.Request(url, data=data, headers=all_headers, method=method)
        if timeout is _DEFAULT:
            timeout = self.request_timeout
        try:
            return self._urlopen(request, timeout=timeout)
        except urllib.error.HTTPError as e:
            try:
                body = e.read()
            except (OSError, http.client.HTTPException):
                body = b""
            finally:
                e.close()
            raise errors.error_from_response(e.code, body, method, url, e.reason) from None
        except urllib.error.URLError as e:
            raise self._transport_error(e.reason, method, url) from None
        except (OSError, http.client.HTTPException) as e:
            raise self._transport_error(e, method, url) from None

    def _transport_error(self, cause, method, url, answering=False):
        """The exception for a network failure: before the answer began (`answering` False)
        the daemon is unreachable; after, the connection broke."""
        if isinstance(cause, (socket.timeout, TimeoutError)):
            return errors.TimeoutError(f"cellboxd at {self.url} did not answer {method} {url} in time "
                                       f"({cause}); raise request_timeout for slow calls",
                                       method=method, url=url)
        if answering:
            return errors.ConnectionError(f"the connection to cellboxd at {self.url} broke while it answered "
                                          f"{method} {url}: {cause}", method=method, url=url)
        return errors.ConnectionError(f"cannot reach cellboxd at {self.url}: {cause}; start it with "
                                      "`make run` or set CELLBOX_URL", method=method, url=url)

    def call(self, method, path, query=None, json_body=_DEFAULT, data=None, headers=None,
             timeout=_DEFAULT):
        """A request whose answer is JSON (None for an empty answer, e.g. 204)."""
        body = self.read(method, path, query, json_body, data, headers, timeout)
        return json.loads(body) if body else None

    def read(self, method, path, query=None, json_body=_DEFAULT, data=None, headers=None,
             timeout=_DEFAULT):
        """A request whose answer is read whole, as bytes."""
        response = self.open(method, path, query, json_body, data, headers, timeout)
        with response:
            try:
                return response.read()
            except (OSError, http.client.HTTPException) as e:
                raise self._transport_error(e, method, path, answering=True) from None

    def copy_to(self, method, path, out, query=None, timeout=_DEFAULT, chunk=1 << 20):
        """A request whose answer is copied into the binary file object `out`."""
        response = self.open(method, path, query, timeout=timeout)
        with response:
            try:
                while True:
                    data = response.read(chunk)
                    if not data:
                        return
                    out.write(data)
            except (OSError, http.client.HTTPException) as e:
                raise self._transport_error(e, method, path, answering=True) from None

    def stream(self, method, path, query=None, json_body=_DEFAULT, timeout=_DEFAULT):
        """A request whose answer is NDJSON: yields each decoded line as soon as it is
        complete. Closing the generator (or leaving the loop) closes the connection, which
        makes the daemon interrupt the cell or kill the command."""
        response = self.open(method, path, query, json_body, timeout=timeout)
        with response:
            try:
                yield from iter_ndjson(response)
            except (OSError, http.client.HTTPException) as e:
                raise self._transport_error(e, method, path, answering=True) from None


def iter_ndjson(response, chunk=1 << 16):
    """Decode an NDJSON body incrementally: read1() returns whatever has arrived, so a line is
    yielded the moment its newline is in, not when the answer ends."""
    pending = bytearray()
    while True:
        data = response.read1(chunk)
        if not data:
            break
        start = len(pending)
        pending += data
        newline = pending.find(b"\n", start)
        while newline >= 0:
            line = bytes(pending[:newline]).strip()
            del pending[:newline + 1]
            if line:
                yield json.loads(line)
            newline = pending.find(b"\n")
    if bytes(pending).strip():
        yield json.loads(bytes(pending))
