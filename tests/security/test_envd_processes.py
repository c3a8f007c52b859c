"""envd's process service (api/envd_process.c), attacked from inside and from a neighbour.

A process started through E2B's `process.Process/Start` is a command of model/command.c: it
joins the sandbox like /v1's commands. With `pty` it gets a pseudo-terminal the daemon opened in
the sandbox's own devpts instance. Each test asserts the attack failed, then
`box.assert_contained()`: host unchanged, daemon healthy, neighbour untouched.
"""
import base64
import json

import requests

from helpers.connect_wire import envd_headers, envelope, process_call, read_envelopes

# What a process on the sandbox's terminal sees, and whether it can push input into it
# (TIOCSTI) or reach the host's terminals.
TERMINAL_PROBE = (
    "import fcntl, json, os, termios\n"
    "st = dict(l.split(':', 1) for l in open('/proc/self/status') if ':' in l)\n"
    "try:\n"
    "    fcntl.ioctl(0, termios.TIOCSTI, b'x'); injected = 'yes'\n"
    "except OSError as e:\n"
    "    injected = e.strerror\n"
    "print(json.dumps({'tty': os.ttyname(0), 'pts': sorted(os.listdir('/dev/pts')),\n"
    "    'uid': os.getuid(), 'seccomp': st['Seccomp'].strip(), 'capeff': st['CapEff'].strip(),\n"
    "    'sid_is_me': os.getsid(0) == os.getpid(), 'injected': injected}))\n")


def start(box, sandbox_id, message):
    return requests.post(f"{box.daemon.origin}/process.Process/Start", data=envelope(message),
                         headers=envd_headers(box.daemon, sandbox_id, "application/connect+json"),
                         timeout=120, stream=True)


def next_messages(response, count=1000, until=None):
    """Envelopes' messages off a streaming response until the end frame or `until(message)`;
    bounded."""
    return [message for _, message in read_envelopes(response, stop=until, limit=count)]


def test_a_terminal_is_the_sandboxes_own_and_cannot_be_injected_into(box, hostile):
    r = start(box, hostile.id, {"process": {"cmd": "/usr/bin/python3", "args": ["-c", TERMINAL_PROBE]},
                                "pty": {"size": {"cols": 200, "rows": 50}}})
    messages = next_messages(r)
    screen = b"".join(base64.b64decode(m["event"]["data"]["pty"]) for m in messages
                      if "data" in m.get("event", {}))
    line = [x for x in screen.decode(errors="replace").splitlines() if x.startswith("{")]
    assert line, screen
    seen = json.loads(line[-1])
    # its terminal is one of the sandbox's devpts instance, which holds only the sandbox's ptys
    assert seen["tty"].startswith("/dev/pts/") and seen["pts"] == ["0", "ptmx"], seen
    # the terminal's session is its own, and it is as confined as the sandbox's program
    assert seen["sid_is_me"] and seen["uid"] == hostile.proof["uid"] and seen["uid"] >= 1000
    assert seen["seccomp"] == "2" and int(seen["capeff"], 16) == 0
    assert seen["injected"] != "yes", seen  # TIOCSTI stays refused
    assert messages[-2]["event"]["end"]["exitCode"] == 0, messages[-2:]
    box.assert_contained()


def test_a_neighbours_process_cannot_be_found_signalled_or_fed(box, hostile, fresh):
    other = fresh()
    r = start(box, other.id, {"process": {"cmd": "/bin/sleep", "args": ["300"]}, "tag": "victim"})
    (first,) = next_messages(r, until=lambda m: "start" in m.get("event", {}))
    pid = first["event"]["start"]["pid"]
    for selector in [{"pid": pid}, {"tag": "victim"}, {"pid": 1}]:
        for method, extra in [("SendSignal", {"signal": "SIGNAL_SIGKILL"}),
                              ("SendInput", {"input": {"stdin": "eA=="}}),
                              ("CloseStdin", {}),
                              ("Update", {"pty": {"size": {"cols": 1, "rows": 1}}})]:
            answer = process_call(box.daemon, hostile.id, method, {"process": selector, **extra})
            assert answer.status_code == 404 and answer.json()["code"] == "not_found", \
                (method, selector, answer.text)
    # the other sandbox's process is still there, and lists nowhere else
    mine = process_call(box.daemon, hostile.id, "List", {}).json()["processes"]
    assert pid not in [p["pid"] for p in mine if p.get("tag") == "victim"]
    theirs = process_call(box.daemon, other.id, "List", {}).json()["processes"]
    assert [p["pid"] for p in theirs if p.get("tag") == "victim"] == [pid]
    assert process_call(box.daemon, other.id, "SendSignal", {"process": {"pid": pid},
                                                             "signal": "SIGNAL_SIGKILL"}).status_code == 200
    box.assert_contained()
