"""How long Node's kernel takes to start, beside Node itself (issue 23: a built-in language's
context ready in <= 50 ms).

    /usr/bin/python3 bench/node_kernel_start.py [BUILD] [--typescript] [--rounds=N]

Interleaves, N times: `node -e ""` to exit; `cellbox-kernel --language=javascript` (which runs
`node <BUILD>/share/cellbox/node/kernel.js` and relays its frames) to its `status: starting` frame
on fd 3; then its first cell (`let x = 1; x + 1`) to `status: idle`. Prints min / median / max in
milliseconds. No sandbox, no daemon.
"""
import json
import os
import socket
import statistics
import subprocess
import sys
import time

NODE = "/usr/bin/node"


def frames(sock, until):
    """Reads frames from `sock` until until(message) is true."""
    buffer = b""
    while True:
        while len(buffer) >= 4 and len(buffer) >= 4 + int.from_bytes(buffer[:4], "little"):
            size = int.from_bytes(buffer[:4], "little")
            message, buffer = json.loads(buffer[4:4 + size]), buffer[4 + size:]
            if until(message):
                return
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise RuntimeError("the kernel closed fd 3")
        buffer += chunk


def state_is(state):
    return lambda m: m["header"]["msg_type"] == "status" and m["content"]["execution_state"] == state


def one_kernel(build, language):
    ours, theirs = socket.socketpair()
    started = time.monotonic()
    argv = [os.path.join(build, "bin", "cellbox-kernel"), "--channel-fd=3", f"--language={language}",
            "--share-dir=" + os.path.join(build, "share", "cellbox")]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, close_fds=False,
                            preexec_fn=lambda: os.dup2(theirs.fileno(), 3))
    theirs.close()
    try:
        frames(ours, state_is("starting"))
        ready = time.monotonic()
        request = {"channel": "shell", "header": {"msg_id": "bench", "session": "bench", "username": "bench",
                                                  "date": "", "msg_type": "execute_request", "version": "5.3"},
                   "parent_header": {}, "metadata": {}, "content": {"code": "let x = 1; x + 1"}}
        body = json.dumps(request).encode()
        ours.sendall(len(body).to_bytes(4, "little") + body)
        frames(ours, state_is("idle"))
        return (ready - started) * 1000, (time.monotonic() - ready) * 1000
    finally:
        proc.kill()  # by pid: only the process this script started
        proc.wait()
        ours.close()


def bare_node():
    started = time.monotonic()
    subprocess.run([NODE, "-e", ""], check=True)
    return (time.monotonic() - started) * 1000


def line(name, values):
    return f"{name:34} {min(values):7.1f} {statistics.median(values):7.1f} {max(values):7.1f}"


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    build = args[0] if args else os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build")
    language = "typescript" if "--typescript" in sys.argv else "javascript"
    rounds = next((int(a.split("=", 1)[1]) for a in sys.argv if a.startswith("--rounds=")), 20)
    bare, start, first = [], [], []
    for _ in range(rounds):
        bare.append(bare_node())
        to_starting, first_cell = one_kernel(build, language)
        start.append(to_starting)
        first.append(first_cell)
    print(f"{'ms, ' + str(rounds) + ' rounds':34} {'min':>7} {'median':>7} {'max':>7}")
    print(line('node -e ""', bare))
    print(line(f"{language} kernel to starting", start))
    print(line("first cell to idle", first))


if __name__ == "__main__":
    main()
