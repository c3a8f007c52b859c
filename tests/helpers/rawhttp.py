"""Raw HTTP over a socket, for what requests cannot show: a server answering before it has
read a large body (413), bytes as they are on the wire, the exact headers of a WebSocket
handshake, and WebSocket frames written and read by hand (broken on purpose, or read while the
client stops reading)."""
import base64
import contextlib
import os
import select
import socket
import struct
import time


class RawResponse:
    def __init__(self, status, reason, headers, body):
        self.status = status
        self.reason = reason
        self.headers = headers      # lower-case name -> value (last one wins)
        self.body = body

    def __repr__(self):
        return f"<RawResponse {self.status} {self.reason} {self.headers}>"


def _parse_head(data):
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    status = int(parts[1])
    reason = parts[2] if len(parts) > 2 else ""
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return status, reason, headers, rest


def _read_response(sock, deadline):
    """The response on `sock`: read until it is complete (its Content-Length), the server closes,
    or the deadline; None when no whole head came."""
    received = b""
    while time.monotonic() < deadline:
        if b"\r\n\r\n" in received:
            status, reason, headers, rest = _parse_head(received)
            length = headers.get("content-length")
            if length is not None and len(rest) >= int(length):
                return RawResponse(status, reason, headers, rest[:int(length)])
        try:
            piece = sock.recv(65536)
        except (ConnectionResetError, socket.timeout):
            piece = b""
        if not piece:
            break
        received += piece
    if b"\r\n\r\n" not in received:
        return None
    status, reason, headers, rest = _parse_head(received)
    return RawResponse(status, reason, headers, rest)


def request(host, port, method, path, headers=None, body_size=0, body_byte=b" ", body_prefix=b"",
            timeout=60, chunk=65536, chunked=False):
    """Send a request whose body is body_prefix + body_byte * (body_size - len(prefix)), with a
    Content-Length (or, chunked=True, in chunked transfer encoding); stop sending as soon as the
    server answers (or closes). Returns the response (head, and the body when it has a
    Content-Length)."""
    hdrs = {"Host": f"{host}:{port}", "Connection": "close"}
    hdrs.update(headers or {})
    if chunked:
        hdrs["Transfer-Encoding"] = "chunked"
    elif body_size or method in ("POST", "PUT", "PATCH"):
        hdrs["Content-Length"] = str(body_size)
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()) + "\r\n"
    sock = socket.create_connection((host, port), timeout=timeout)
    deadline = time.monotonic() + timeout
    try:
        sock.sendall(head.encode("latin-1"))
        sent = 0
        block = body_byte * chunk
        body_prefix = body_prefix[:body_size]
        while sent < body_size and time.monotonic() < deadline:
            readable, writable, _ = select.select([sock], [sock], [], 1.0)
            if readable:
                break  # the server answered (or closed) before the whole body: stop sending
            if writable:
                if sent < len(body_prefix):
                    piece = body_prefix[sent:sent + chunk]
                else:
                    piece = block[:min(chunk, body_size - sent)]
                try:
                    if chunked:
                        sock.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                        sent += len(piece)
                    else:
                        sent += sock.send(piece)
                except (BrokenPipeError, ConnectionResetError):
                    break
        if chunked and sent >= body_size:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(b"0\r\n\r\n")  # the last chunk: the body is complete
        response = _read_response(sock, deadline)
        if response is None:
            raise AssertionError(f"no HTTP response to {method} {path}")
        return response
    finally:
        with contextlib.suppress(OSError):
            sock.close()


def websocket_upgrade(host, port, path, headers=None, protocols=None, then=b"", timeout=30):
    """Send a WebSocket upgrade request on a new socket (and `then`, bytes that follow it, in the
    same write); read the answer's head. Returns (socket, head bytes, the bytes read after the
    head); the socket is the caller's to close."""
    key = base64.b64encode(os.urandom(16)).decode()
    hdrs = {
        "Host": f"{host}:{port}",
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Key": key,
        "Sec-WebSocket-Version": "13",
    }
    if protocols:
        hdrs["Sec-WebSocket-Protocol"] = ", ".join(protocols)
    hdrs.update(headers or {})
    head = f"GET {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()) + "\r\n"
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        sock.sendall(head.encode("latin-1") + then)
        data = b""
        while b"\r\n\r\n" not in data:
            more = sock.recv(4096)
            if not more:
                raise AssertionError(f"no handshake response (got {data[:200]!r})")
            data += more
    except BaseException:
        sock.close()
        raise
    answer, _, rest = data.partition(b"\r\n\r\n")
    return sock, answer, rest


def websocket_handshake(host, port, path, headers=None, protocols=None, timeout=30):
    """Send a WebSocket upgrade request; return the response head (status, headers), then close."""
    sock, answer, rest = websocket_upgrade(host, port, path, headers, protocols, timeout=timeout)
    sock.close()
    status, reason, headers, rest = _parse_head(answer + b"\r\n\r\n" + rest)
    return RawResponse(status, reason, headers, rest)


def split_server_frame(data):
    """The first whole WebSocket frame in `data` (a server's frames are not masked): (opcode,
    payload, the bytes after it), or None while `data` holds less than a whole frame."""
    if len(data) < 2:
        return None
    opcode, length, at = data[0] & 0x0F, data[1] & 0x7F, 2
    if length == 126:
        if len(data) < 4:
            return None
        length, at = struct.unpack(">H", data[2:4])[0], 4
    elif length == 127:
        if len(data) < 10:
            return None
        length, at = struct.unpack(">Q", data[2:10])[0], 10
    if len(data) < at + length:
        return None
    return opcode, data[at:at + length], data[at + length:]


def read_server_frame(sock, pending):
    """The next WebSocket frame from sock (`pending`: bytes of the stream already read):
    (opcode, payload, the bytes read after it)."""
    frame = split_server_frame(pending)
    while frame is None:
        more = sock.recv(65536)
        if not more:
            raise AssertionError("the server closed the connection")
        pending += more
        frame = split_server_frame(pending)
    return frame


def exchange(host, port, data, timeout=30):
    """Send `data` (a whole request, bytes as they are: NULs, bytes >= 0x80, duplicated or odd
    headers) and read until the server closes or the response is complete. Returns the
    RawResponse, or None when the server closed without answering."""
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        sock.sendall(data)
        return _read_response(sock, time.monotonic() + timeout)
    finally:
        sock.close()
