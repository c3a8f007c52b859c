"""The module-level stateless run, where the client finds the daemon and its token, and the
error classes (status, message, which class for which answer)."""
import builtins
import re
import socket
import threading

import pytest

import cellbox
from cellbox import errors
from cellbox._transport import Connection, resolve_token, resolve_url
from helpers.daemon import free_port


def test_stateless_run(conn):
    result = cellbox.run("print(6 * 7)", **conn)
    assert isinstance(result, cellbox.RunResult)
    assert result.ok and result.exit_code == 0 and result.output == "42\n" and result.stdout == "42\n"
    assert result.accounting["wall_ms"] >= 0

    failed = cellbox.run("echo one; exit 4", language="bash", **conn)
    assert failed.status == "error" and failed.exit_code == 4 and failed.output == "one\n"

    blocks = cellbox.run(code_blocks=[{"language": "python", "code": "open('out.txt', 'w').write(open('in.txt').read().upper())"},
                                      ("sh", "cat out.txt; exit 5"), {"language": "python", "code": "print('never')"}],
                         files={"in.txt": "abc", "raw.bin": b"\x00"}, fetch_files=["out.txt"], **conn)
    assert blocks.exit_code == 5 and blocks.output == "ABC"
    assert [b["exit_code"] for b in blocks.blocks] == [0, 5]
    assert blocks.files == {"out.txt": b"ABC"}

    timed = cellbox.run("import time; time.sleep(30)", timeout_s=1, **conn)
    assert timed.status == "timeout" and timed.exit_code == 124 and timed.timed_out and "Timeout" in timed.output

    with pytest.raises(ValueError):
        cellbox.run(**conn)
    with pytest.raises(cellbox.BadRequestError):
        cellbox.run("x", language="cobol", **conn)


def test_url_and_token_resolution(monkeypatch, tmp_path, conn):
    monkeypatch.delenv("CELLBOX_URL", raising=False)
    monkeypatch.delenv("CELLBOX_TOKEN", raising=False)
    monkeypatch.chdir(tmp_path)
    assert resolve_url() == "http://127.0.0.1:8888"
    assert resolve_token() is None
    (tmp_path / ".cellbox").mkdir()
    (tmp_path / ".cellbox" / "token").write_text("from-file\n")
    (tmp_path / "deeper" / "still").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "deeper" / "still")
    assert resolve_token() == "from-file"            # the nearest parent that has one
    monkeypatch.setenv("CELLBOX_TOKEN", "from-env")
    monkeypatch.setenv("CELLBOX_URL", "http://example.invalid:1")
    assert resolve_token() == "from-env" and resolve_url() == "http://example.invalid:1"
    assert resolve_token("given") == "given" and resolve_url("http://given") == "http://given"

    # a real call with both taken from the environment
    monkeypatch.setenv("CELLBOX_URL", conn["url"])
    monkeypatch.setenv("CELLBOX_TOKEN", conn["token"])
    assert isinstance(cellbox.Sandbox.list(), list)
    # and the token from .cellbox/token
    monkeypatch.delenv("CELLBOX_TOKEN")
    (tmp_path / ".cellbox" / "token").write_text(conn["token"] + "\n")
    assert isinstance(cellbox.Sandbox.list(), list)
    assert Connection(url=conn["url"] + "/").endpoint("v1/x", {"a": True, "b": None}) == conn["url"] + "/v1/x?a=true"


def test_authentication_error(conn):
    with pytest.raises(cellbox.AuthenticationError) as e:
        cellbox.Sandbox.create(url=conn["url"], token="wrong")
    assert e.value.status == 401 and "token" in e.value.message
    assert str(e.value).startswith("401 Unauthorized: ")
    with pytest.raises(cellbox.AuthenticationError):
        cellbox.Sandbox.list(url=conn["url"], token="")


def test_http_errors_carry_status_and_message(conn, sandbox):
    with pytest.raises(cellbox.BadRequestError) as e:
        cellbox.Sandbox.create(timeout_s=-1, **conn)
    assert e.value.status == 400 and "timeout_s" in e.value.message and e.value.reason == "Bad Request"
    with pytest.raises(cellbox.NotFoundError) as e:
        cellbox.Sandbox.create(template="no-such-template", **conn)
    assert e.value.status == 404
    with pytest.raises(cellbox.BadRequestError, match="memory"):
        cellbox.Sandbox.create(limits={"memory": "lots"}, **conn)
    with pytest.raises(cellbox.ForbiddenError):
        cellbox.Sandbox.create(network=True, **conn)      # the daemon runs without --allow-network
    with pytest.raises(cellbox.NotFoundError) as e:
        sandbox.files.read("missing.txt")
    assert e.value.method == "GET" and "missing.txt" in e.value.url
    gone = cellbox.Sandbox("no-such-id", **conn)
    for call in (gone.info, gone.pause, gone.resume, lambda: gone.run_code("1"), gone.list_contexts,
                 lambda: gone.commands.run("true"), lambda: gone.files.list()):
        with pytest.raises(cellbox.NotFoundError):
            call()
    assert gone.kill() is False


def test_dead_sandbox_error(conn):
    with cellbox.Sandbox.create(timeout_s=0, **conn) as sb:
        execution = sb.run_code("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
        assert execution.error.name == "KernelDied" and "SIGKILL" in execution.error.value
        info = sb.info()
        assert info.state == "dead" and "killed by signal 9" in info.reason
        with pytest.raises(cellbox.SandboxDeadError) as e:
            sb.run_code("1")
        assert e.value.status == 409 and "is dead" in e.value.message
        sb.restart_context(sb.id)                    # the way back, as the message says
        assert sb.run_code("1 + 1").text == "2"


def test_unreachable_daemon():
    port = free_port()                     # bound and closed again: nobody listens
    with pytest.raises(cellbox.ConnectionError) as e:
        cellbox.Sandbox.create(url=f"http://127.0.0.1:{port}", token="t")
    assert isinstance(e.value, builtins.ConnectionError) and e.value.status is None
    assert "cannot reach cellboxd" in str(e.value)


def test_client_side_timeout():
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)                        # accepts connections, never answers
    try:
        with pytest.raises(cellbox.TimeoutError) as e:
            cellbox.Sandbox.list(url=f"http://127.0.0.1:{silent.getsockname()[1]}", token="t",
                                 request_timeout=0.3)
        assert isinstance(e.value, builtins.TimeoutError) and isinstance(e.value, cellbox.CellboxError)
    finally:
        silent.close()


def test_stream_cut_short_is_an_error():
    """A server that starts the execution stream and goes away before end_of_execution."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def serve():
        conn, _ = server.accept()
        request = b""
        while b"\r\n\r\n" not in request:          # the whole request, or closing would reset
            request += conn.recv(65536)
        head, _, body = request.partition(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
        while len(body) < length:
            body += conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nConnection: close\r\n\r\n"
                     b'{"type":"stdout","text":"partial\\n"}\n')
        conn.close()

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        sb = cellbox.Sandbox("x", url=f"http://127.0.0.1:{server.getsockname()[1]}", token="t")
        seen = []
        with pytest.raises(cellbox.ConnectionError, match="end_of_execution"):
            sb.run_code("print('partial')", on_stdout=seen.append)
        assert seen == ["partial\n"]
    finally:
        thread.join()
        server.close()


@pytest.mark.parametrize("status,body,cls", [
    (400, b'{"reason":"Bad Request","message":"unknown field \'foo\'"}', cellbox.BadRequestError),
    (401, b'{"reason":"Unauthorized","message":"a valid token is required"}', cellbox.AuthenticationError),
    (403, b'{"reason":"Forbidden","message":"kernel limit"}', cellbox.ForbiddenError),
    (404, b'{"reason":"Not Found","message":"sandbox x does not exist"}', cellbox.NotFoundError),
    (409, b'{"reason":"Conflict","message":"sandbox x is paused: resume it"}', cellbox.SandboxPausedError),
    (409, b'{"reason":"Conflict","message":"sandbox x is dead: killed by signal 9"}', cellbox.SandboxDeadError),
    (409, b'{"reason":"Conflict","message":"a non-empty directory"}', cellbox.ConflictError),
    (413, b'{"reason":"Payload Too Large","message":"over the disk limit"}', cellbox.PayloadTooLargeError),
    (507, b'{"reason":"Insufficient Storage","message":"disk full"}', cellbox.InsufficientStorageError),
    (500, b"not json at all", cellbox.ServerError),
    (418, b"", cellbox.CellboxError),
])
def test_error_classes(status, body, cls):
    error = errors.error_from_response(status, body, "GET", "http://h/v1/x", "Reason")
    assert type(error) is cls and isinstance(error, cellbox.CellboxError)
    assert error.status == status and error.message
    if body.startswith(b"{"):
        assert error.message in body.decode() and error.reason != "Reason"
    if status == 409:
        assert isinstance(error, cellbox.ConflictError)
    if body == b"not json at all":
        assert error.message == "not json at all"


def test_a_local_daemon_is_reached_without_the_proxy(conn, monkeypatch):
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")     # nothing listens there
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert isinstance(cellbox.Sandbox.list(**conn), list)
