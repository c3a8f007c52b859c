"""envd's process.Process on the wire (api/envd_process.c), as E2B's SDKs call it inside a
sandbox: Start and Connect answer a Connect stream of envelopes — the start event with the pid
the sandbox's pid namespace gives, data events of base64 bytes, the end event as envd writes it
("exit status N", or "signal: killed" with exitCode -1) — then the end-of-stream frame; List,
SendInput, SendSignal, CloseStdin and Update are unary, StreamInput client streaming. Processes
outlive the Start call; an exited one is not found."""
import base64
import io
import threading

import pytest
import requests

from helpers.connect_wire import envd_headers, envelope, process_call, read_envelopes
from helpers.e2b import api, made_sandbox

pytestmark = pytest.mark.cellbox_only  # Jupyter Server has no E2B API

class Body:
    """A whole response body read as read_envelopes reads a stream."""
    def __init__(self, content):
        self.raw = io.BytesIO(content)


def stream(daemon, sandbox_id, method, message, extra=None):
    return requests.post(f"{daemon.origin}/process.Process/{method}", data=envelope(message),
                         headers=envd_headers(daemon, sandbox_id, "application/connect+json", extra),
                         timeout=60, stream=True)


def events(frames):
    """(kind, body) of each event, keepalives left out."""
    out = []
    for flags, message in frames:
        if flags == 0x02:
            continue
        ((kind, body),) = message["event"].items()
        if kind != "keepalive":
            out.append((kind, body))
    return out


def output(evs, name):
    return b"".join(base64.b64decode(body[name]) for kind, body in evs
                    if kind == "data" and name in body)


@pytest.fixture(scope="module")
def sandbox_id(daemon):
    with made_sandbox(daemon, templateID="base", timeout=300) as created:
        yield created["sandboxID"]


def test_start_streams_start_data_and_end_events(daemon, sandbox_id):
    r = stream(daemon, sandbox_id, "Start", {"process": {
        "cmd": "/bin/bash", "args": ["-c", "printf 'out\\x00\\xff'; echo err >&2; echo $$; exit 3"]}})
    assert r.status_code == 200 and r.headers["Content-Type"] == "application/connect+json"
    frames = read_envelopes(r)
    assert frames[-1] == (0x02, {}), frames
    evs = events(frames)
    assert evs[0][0] == "start" and isinstance(evs[0][1]["pid"], int) and evs[0][1]["pid"] > 1
    stdout = output(evs, "stdout")
    assert stdout.startswith(b"out\x00\xff"), stdout  # bytes, not text
    assert stdout[5:].strip() == str(evs[0][1]["pid"]).encode()  # the pid it has inside
    assert output(evs, "stderr") == b"err\n"
    assert evs[-1] == ("end", {"exitCode": 3, "exited": True, "status": "exit status 3",
                               "error": "exit status 3"})


def test_a_killed_process_ends_as_envd_says_and_is_then_not_found(daemon, sandbox_id):
    r = stream(daemon, sandbox_id, "Start", {"process": {"cmd": "/bin/sleep", "args": ["300"]},
                                             "tag": "wire-sleeper"})
    (start,) = read_envelopes(r, stop=lambda m: "start" in m.get("event", {}))
    pid = start[1]["event"]["start"]["pid"]
    listed = process_call(daemon, sandbox_id, "List", {}).json()["processes"]
    (info,) = [p for p in listed if p["pid"] == pid]
    assert info["config"]["cmd"] == "/bin/sleep" and info["config"]["args"] == ["300"]
    assert info["tag"] == "wire-sleeper" and info["config"]["cwd"] == "/home/user"  # the default
    r2 = process_call(daemon, sandbox_id, "SendSignal", {"process": {"tag": "wire-sleeper"},
                                                         "signal": "SIGNAL_SIGKILL"})
    assert r2.status_code == 200 and r2.json() == {}, r2.text
    evs = events(read_envelopes(r))
    assert evs[-1] == ("end", {"exitCode": -1, "exited": False, "status": "signal: killed",
                               "error": "signal: killed"})
    r3 = process_call(daemon, sandbox_id, "SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"})
    assert r3.status_code == 404 and r3.json()["code"] == "not_found", r3.text
    assert str(pid) in r3.json()["message"]
    r4 = stream(daemon, sandbox_id, "Connect", {"process": {"pid": pid}})
    ((flags, end),) = read_envelopes(r4)
    assert flags == 0x02 and end["error"]["code"] == "not_found", end


def test_a_process_outlives_its_start_call_and_connect_follows_it(daemon, sandbox_id):
    r = stream(daemon, sandbox_id, "Start", {"process": {
        "cmd": "/bin/bash", "args": ["-c", "read line; echo got:$line; read again; echo bye"]},
        "stdin": True})
    (start,) = read_envelopes(r, stop=lambda m: "start" in m.get("event", {}))
    pid = start[1]["event"]["start"]["pid"]
    r.close()  # the client goes away: the process goes on, as envd's do
    assert pid in [p["pid"] for p in process_call(daemon, sandbox_id, "List", {}).json()["processes"]]
    follower = stream(daemon, sandbox_id, "Connect", {"process": {"pid": pid}})
    got = []
    reader = threading.Thread(target=read_envelopes, args=(follower,), kwargs={"into": got})
    reader.start()
    # the follower is attached once its start event came; wait for it (bounded by the stream)
    for _ in range(100):
        if got or not reader.is_alive():
            break
        reader.join(0.05)
    data = base64.b64encode(b"one\n").decode()
    r2 = process_call(daemon, sandbox_id, "SendInput", {"process": {"pid": pid}, "input": {"stdin": data}})
    assert r2.status_code == 200, r2.text
    r3 = process_call(daemon, sandbox_id, "CloseStdin", {"process": {"pid": pid}})
    assert r3.status_code == 200, r3.text
    reader.join(60)
    evs = events(got)
    assert evs[0] == ("start", {"pid": pid})
    assert output(evs, "stdout") == b"got:one\nbye\n"
    assert evs[-1][0] == "end" and evs[-1][1]["exitCode"] == 0 and evs[-1][1]["exited"]


def test_errors_name_the_problem(daemon, sandbox_id):
    r = stream(daemon, sandbox_id, "Start", {"process": {"cmd": "/bin/true", "cwd": "/no/such/dir"}})
    ((flags, end),) = read_envelopes(r)
    assert end["error"]["code"] == "invalid_argument" and "/no/such/dir" in end["error"]["message"]
    r = stream(daemon, sandbox_id, "Start", {"process": {"args": ["x"]}})
    ((flags, end),) = read_envelopes(r)
    assert end["error"]["code"] == "invalid_argument" and "cmd" in end["error"]["message"]
    r = process_call(daemon, sandbox_id, "SendInput", {"process": {"pid": 999999},
                                                       "input": {"stdin": "eA=="}})
    assert r.status_code == 404 and r.json()["code"] == "not_found"
    r = stream(daemon, sandbox_id, "Start", {"process": {"cmd": "/bin/sleep", "args": ["300"]},
                                             "stdin": False})
    (start,) = read_envelopes(r, stop=lambda m: "start" in m.get("event", {}))
    pid = start[1]["event"]["start"]["pid"]
    r2 = process_call(daemon, sandbox_id, "Update", {"process": {"pid": pid},
                                                     "pty": {"size": {"cols": 100, "rows": 30}}})
    assert r2.status_code == 400 and r2.json()["code"] == "failed_precondition", r2.text
    r3 = process_call(daemon, sandbox_id, "SendInput", {"process": {"pid": pid}, "input": {"stdin": "eA=="}})
    assert r3.status_code == 400 and "stdin" in r3.json()["message"]  # started without stdin
    r4 = process_call(daemon, sandbox_id, "SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGHUP"})
    assert r4.status_code == 400 and r4.json()["code"] == "invalid_argument"
    process_call(daemon, sandbox_id, "SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGTERM"})
    evs = events(read_envelopes(r))
    assert evs[-1][1]["status"] == "signal: terminated"


def test_a_terminal_process_runs_on_the_sandboxes_pty(daemon, sandbox_id):
    r = stream(daemon, sandbox_id, "Start", {
        "process": {"cmd": "/bin/bash", "args": ["-c", "tty; stty size; echo $TERM; read x; stty size"]},
        "pty": {"size": {"cols": 91, "rows": 17}}})
    got = []
    reader = threading.Thread(target=read_envelopes, args=(r,), kwargs={"into": got})
    reader.start()
    for _ in range(200):
        if b"xterm" in output(events(list(got)), "pty") or not reader.is_alive():
            break
        reader.join(0.05)
    pid = events(got)[0][1]["pid"]
    r2 = process_call(daemon, sandbox_id, "Update", {"process": {"pid": pid},
                                                     "pty": {"size": {"cols": 120, "rows": 40}}})
    assert r2.status_code == 200, r2.text
    r4 = process_call(daemon, sandbox_id, "CloseStdin", {"process": {"pid": pid}})  # it waits in `read`
    assert r4.status_code == 400 and r4.json()["code"] == "failed_precondition"
    r3 = process_call(daemon, sandbox_id, "SendInput", {"process": {"pid": pid},
                                                        "input": {"pty": base64.b64encode(b"go\n").decode()}})
    assert r3.status_code == 200, r3.text
    reader.join(60)
    evs = events(got)
    text = output(evs, "pty").decode()
    assert "/dev/pts/" in text and "17 91" in text and "xterm-256color" in text, text
    assert "40 120" in text, text  # the resize reached it
    assert "go" in text  # the terminal echoed the input
    assert not output(evs, "stdout") and not output(evs, "stderr")
    assert evs[-1][0] == "end" and evs[-1][1]["exitCode"] == 0


def test_stream_input_writes_each_data_message(daemon, sandbox_id):
    r = stream(daemon, sandbox_id, "Start", {"process": {
        "cmd": "/bin/bash", "args": ["-c", "read a; read b; echo [$a][$b]"]}, "stdin": True})
    got = []
    reader = threading.Thread(target=read_envelopes, args=(r,), kwargs={"into": got})
    reader.start()
    for _ in range(100):
        if got or not reader.is_alive():
            break
        reader.join(0.05)
    pid = events(list(got))[0][1]["pid"]
    body = (envelope({"start": {"process": {"pid": pid}}}) + envelope({"keepalive": {}}) +
            envelope({"data": {"input": {"stdin": base64.b64encode(b"first\n").decode()}}}) +
            envelope({"data": {"input": {"stdin": base64.b64encode(b"second\n").decode()}}}))
    answer = requests.post(f"{daemon.origin}/process.Process/StreamInput", data=body, timeout=60,
                           headers=envd_headers(daemon, sandbox_id, "application/connect+json"))
    assert answer.status_code == 200, answer.text
    parsed = read_envelopes(Body(answer.content))
    assert parsed == [(0, {}), (0x02, {})], parsed
    reader.join(60)
    evs = events(got)
    assert output(evs, "stdout") == b"[first][second]\n"
    assert evs[-1][1]["exitCode"] == 0
    # a process that is gone: the call fails with not_found in its end frame
    gone = requests.post(f"{daemon.origin}/process.Process/StreamInput", timeout=60,
                         data=envelope({"start": {"process": {"pid": pid}}}),
                         headers=envd_headers(daemon, sandbox_id, "application/connect+json"))
    frames_gone = read_envelopes(Body(gone.content))
    assert frames_gone[-1][0] == 0x02 and frames_gone[-1][1]["error"]["code"] == "not_found"


def test_input_a_process_does_not_read_is_bounded(daemon, sandbox_id):
    r = stream(daemon, sandbox_id, "Start", {"process": {"cmd": "/bin/sleep", "args": ["300"]},
                                             "stdin": True})
    (start,) = read_envelopes(r, stop=lambda m: "start" in m.get("event", {}))
    pid = start[1]["event"]["start"]["pid"]
    chunk = base64.b64encode(b"x" * (3 << 20)).decode()
    answers = []
    for _ in range(4):  # 3 MiB each: the third passes the 8 MiB the daemon holds unread
        answer = process_call(daemon, sandbox_id, "SendInput", {"process": {"pid": pid},
                                                                "input": {"stdin": chunk}})
        answers.append((answer.status_code, answer.json().get("code")))
        if answer.status_code != 200:
            assert "8 MiB" in answer.json()["message"], answer.text
            break
    assert answers == [(200, None), (200, None), (429, "resource_exhausted")], answers
    # the process is untouched by the refusal
    assert pid in [p["pid"] for p in process_call(daemon, sandbox_id, "List", {}).json()["processes"]]
    process_call(daemon, sandbox_id, "SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"})
    assert events(read_envelopes(r))[-1][1]["status"] == "signal: killed"


def test_a_tag_names_the_running_process_that_has_it(daemon, sandbox_id):
    done = stream(daemon, sandbox_id, "Start", {"process": {"cmd": "/bin/true"}, "tag": "job"})
    assert events(read_envelopes(done))[-1][1]["exitCode"] == 0
    r = stream(daemon, sandbox_id, "Start", {"process": {"cmd": "/bin/sleep", "args": ["300"]},
                                             "tag": "job"})
    (start,) = read_envelopes(r, stop=lambda m: "start" in m.get("event", {}))
    pid = start[1]["event"]["start"]["pid"]
    done2 = stream(daemon, sandbox_id, "Start", {"process": {"cmd": "/bin/true"}, "tag": "job"})
    assert events(read_envelopes(done2))[-1][1]["exitCode"] == 0  # a newer one, ended
    follower = stream(daemon, sandbox_id, "Connect", {"process": {"tag": "job"}})
    (first,) = read_envelopes(follower, stop=lambda m: "start" in m.get("event", {}))
    assert first[1] == {"event": {"start": {"pid": pid}}}
    answer = process_call(daemon, sandbox_id, "SendSignal", {"process": {"tag": "job"},
                                                             "signal": "SIGNAL_SIGKILL"})
    assert answer.status_code == 200, answer.text
    assert events(read_envelopes(follower))[-1][1]["status"] == "signal: killed"
    assert events(read_envelopes(r))[-1][1]["status"] == "signal: killed"


def test_a_paused_sandbox_starts_no_process_until_resumed(daemon):
    r = api(daemon, "POST", "/sandboxes", json={"templateID": "base", "timeout": 300})
    assert r.status_code == 201, r.text
    sid = r.json()["sandboxID"]
    try:
        assert api(daemon, "POST", f"/sandboxes/{sid}/pause").status_code == 204
        r = stream(daemon, sid, "Start", {"process": {"cmd": "/bin/true"}})
        # created without autoResume: E2B's proxy answer for a paused sandbox, saying what to do
        assert r.status_code == 502 and "paused" in r.json()["message"], r.text
        # the daemon is not stuck: it answers, and once resumed the sandbox runs processes
        resumed = api(daemon, "POST", f"/sandboxes/{sid}/connect", json={"timeout": 300})
        assert resumed.status_code in (200, 201), resumed.text
        r = stream(daemon, sid, "Start", {"process": {"cmd": "/bin/true"}})
        assert events(read_envelopes(r))[-1][1]["exitCode"] == 0
    finally:
        api(daemon, "DELETE", f"/sandboxes/{sid}")
