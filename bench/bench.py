#!/usr/bin/python3
"""make bench: cellbox and Debian's Jupyter Server + ipykernel, side by side, same client.

Both servers run on this machine in one run, on free loopback ports, and are driven through the
same code below (REST + the legacy WebSocket framing, as AutoGen speaks it). Figures and ratios are
printed, written to bench/results/latest.json and drawn to bench/results/latest.png.

    /usr/bin/python3 bench/bench.py [--quick] [--idle N] [--only restart|e2b|network|templates|languages|checkpoints] [--sandboxes N]

`--only restart` runs the restart figure alone (sandboxes kept across a kill -9 and a SIGUSR2 of
cellboxd and adopted by the next one, beside Jupyter Server losing its kernels) and writes
bench/results/restart-latest.json, leaving latest.json to full runs. `--only e2b` runs E2B's
SDK beside /v1 alone (commands.run('true') and a 10 MiB files.write against their /v1 routes,
tests/clients/node/e2b_bench.mjs) into bench/results/e2b-latest.json; a full run has the same
figures under "e2b_sdk_vs_v1". `--only network` (root) runs the network figures alone into
bench/results/network-latest.json, on a real networked cellbox sandbox: create -> first result
with network on beside off (alternating, one daemon, no warm pool; then again on a daemon with a
warm pool, both sides taken from it), and HTTP download throughput from the tests' own web
server (tests/helpers/test_internet.py) into the sandbox beside the host's own download of the
same file. A full run has them under "network". `--only templates` (root) runs the template
figures alone into bench/results/templates-latest.json (a full run has them under "templates"):
a template built with POST /v1/templates from E2B's walkthrough Dockerfile (`RUN pip install`
of the tests' own index's wheel, helpers/test_internet.py), printed beside E2B's 1 min 59 s for
the same build; a cached rebuild; create -> first result from it beside python3's, alternating,
with no warm pool and with one; the memory (PSS, RSS) of its zygote and of each idle kernel
beside python3's; and its /usr as an overlay view or a loop-mounted image (bench/usr_view.py).
`--only languages` runs the languages figure alone into bench/results/languages-latest.json (a
full run has it under "languages"): for python, javascript, typescript, bash and r, create ->
first result of a new sandbox of that kernelspec (Kernel Gateway, no warm pool), a context of it
in a sandbox that exists (/v1 contexts {language}), and a trivial cell's round trip (medians),
beside Jupyter Server running the same kernel where Debian has one (ipykernel, IRkernel).
`--only checkpoints` runs the checkpoint figures alone into bench/results/checkpoints-latest.json
(bench/checkpoints.py: fork, snapshot and restore of ~100 MiB of DataFrames, hibernation, and
another sandbox's round trips while one is snapshotted or restored; beside E2B's published pause
and resume figures); a full run has them under "checkpoints".
"""
import argparse
import concurrent.futures
import contextlib
import glob
import json
import os
import platform
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import requests
import websocket

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checkpoints  # noqa: E402  (bench/checkpoints.py, beside this file)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
RESULTS = os.path.join(REPO, "bench", "results")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=60, poll=0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(poll)
    raise RuntimeError(f"nothing listens on port {port}")


class Server:
    """A server under test: start, base URL, token, stop (by pid and process group)."""

    def __init__(self, name, argv, port, token, env=None, ready_after=0.0, poll=0.05):
        self.name, self.port, self.token = name, port, token
        self.base = f"http://127.0.0.1:{port}"
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True)
        try:
            wait_port(port, poll=poll)
        except RuntimeError:
            self.log.seek(0)
            sys.stderr.write(self.log.read().decode(errors="replace")[-3000:])
            self.stop()
            raise
        time.sleep(ready_after)
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"token {token}"

    def stop(self):
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def cellbox_argv(data_dir, pool_size, port, token, extra=()):
    return [os.path.join(REPO, "build", "bin", "cellboxd"), "--port", str(port), "--token", token,
            "--data-dir", data_dir, "--pool-size", str(pool_size), "--log-level", "warn",
            "--max-pids-limit", "100000", *extra]


def start_cellbox(data_dir, pool_size, extra=()):
    port, token = free_port(), secrets.token_hex(16)
    server = Server("cellbox", cellbox_argv(data_dir, pool_size, port, token, extra), port, token)
    try:
        wait_ready(server, pool_size)
    except BaseException:
        server.stop()  # and with it the sandboxes it made
        raise
    return server


def wait_ready(server, pool_size, timeout=120):
    """The zygote imports for a second or two and the pool fills after it (GET /api says)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        state = server.http.get(server.base + "/api").json()
        if state.get("zygote_ready") and state.get("warm_pool_ready", 0) >= pool_size:
            return
        time.sleep(0.1)
    raise RuntimeError(f"cellbox not ready after {timeout} s: {state}")


def template_state(server, name=None):
    """GET /api's zygote and pool figures: the default template's, or template `name`'s."""
    state = server.http.get(server.base + "/api").json()
    return state if name is None else state.get("templates", {}).get(name, {})


def wait_pool(server, pool_size, name=None, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline and template_state(server, name).get("warm_pool_ready", 0) < pool_size:
        time.sleep(0.02)


def start_jupyter(root, ready_after=1.0, poll=0.05):
    os.makedirs(root, exist_ok=True)
    port, token = free_port(), secrets.token_hex(16)
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=os.path.join(root, "runtime"),
               JUPYTER_DATA_DIR=os.path.join(root, "data"), JUPYTER_CONFIG_DIR=os.path.join(root, "config"),
               IPYTHONDIR=os.path.join(root, "ipython"), HOME=root)
    argv = ["/usr/bin/python3", "-m", "jupyter_server", "--no-browser", f"--port={port}",
            "--ServerApp.ip=127.0.0.1", f"--ServerApp.token={token}", f"--ServerApp.root_dir={root}",
            "--ServerApp.port_retries=0", "--allow-root"]
    return Server("jupyter", argv, port, token, env=env, ready_after=ready_after, poll=poll)


def execute_request(code):
    return json.dumps({"header": {"msg_id": uuid.uuid4().hex, "msg_type": "execute_request",
                                  "session": "bench", "username": "bench", "version": "5.3",
                                  "date": ""},
                       "parent_header": {}, "metadata": {}, "channel": "shell",
                       "content": {"code": code, "silent": False, "store_history": True,
                                   "user_expressions": {}, "allow_stdin": False,
                                   "stop_on_error": True}})


class Kernel:
    def __init__(self, server, env=None, name="python3"):
        self.server = server
        body = {"name": name, **({"env": env} if env else {})}
        response = server.http.post(server.base + "/api/kernels", json=body)
        response.raise_for_status()
        self.id = response.json()["id"]
        # Without wsaccel (not in Debian), websocket-client checks each text frame's UTF-8 in
        # pure Python, ~83 µs for a 550-byte message: nearly half of a trivial cell's round trip
        # here, spent in the client and the same for both servers. Browsers and jupyter_server's
        # Tornado client check in native code, so the benchmark does not measure that check.
        self.ws = websocket.create_connection(
            f"ws://127.0.0.1:{server.port}/api/kernels/{self.id}/channels",
            header=[f"Authorization: token {server.token}"], timeout=120,
            skip_utf8_validation=True)

    def run(self, code, until="idle"):
        """Sends a cell; returns when its execute_result (or idle) arrives."""
        request = execute_request(code)
        msg_id = json.loads(request)["header"]["msg_id"]
        self.ws.send(request)
        while True:
            message = json.loads(self.ws.recv())
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if until == "result" and message["msg_type"] == "execute_result":
                return message
            if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
                return message

    def delete(self):
        self.ws.close()
        self.server.http.delete(self.server.base + f"/api/kernels/{self.id}")


def create_to_first_result(server, count, pause, pool_size=0, env=None, name="python3"):
    times = []
    for _ in range(count):
        if pool_size:
            wait_pool(server, pool_size, name)  # "warm pool": measured with the pool refilled
        start = time.perf_counter()
        kernel = Kernel(server, env, name)
        kernel.run("1+1", until="result")
        times.append((time.perf_counter() - start) * 1000)
        kernel.delete()
        time.sleep(pause)
    return times


# A cell as agents write them: functions, a loop, a class, a result. Its own work is ~0.1 ms, so
# its round trip shows what the kernel does around a cell of some length (parsing, naming).
ANALYSIS_CELL = """import math

def area(r):
    \"\"\"Area of a circle.\"\"\"
    return math.pi * r ** 2

results = []
for radius in range(1, 20):
    value = area(radius)
    if value > 100:
        results.append((radius, round(value, 2)))
total = sum(v for _, v in results)
summary = f"{len(results)} circles, total area {total:.1f}"
data = {"a": [1, 2, 3], "b": [4, 5, 6]}
sums = {}
for key, values in data.items():
    sums[key] = (sum(values), max(values))

class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __repr__(self):
        return f"Point({self.x}, {self.y})"

points = [Point(i, i * i) for i in range(10)]
len(points)"""


def round_trips(server, count, code="1+1"):
    kernel = Kernel(server)
    kernel.run(code)
    times = []
    for _ in range(count):
        start = time.perf_counter()
        kernel.run(code)
        times.append((time.perf_counter() - start) * 1000)
    kernel.delete()
    return times


def round_trips_while_creating(server, seconds):
    """A neighbour's view: one kernel's trivial round trips while another client creates, uses
    and deletes sandboxes without pause (everything the server does per create that holds up
    other sessions shows in the tail). Returns the round trips in ms."""
    kernel = Kernel(server)
    for _ in range(20):
        kernel.run("1+1")
    stop = threading.Event()

    def churn():
        while not stop.is_set():
            other = Kernel(server)
            other.run("1+1", until="result")
            other.delete()

    thread = threading.Thread(target=churn)
    thread.start()
    time.sleep(0.5)
    times = []
    end = time.perf_counter() + seconds
    try:
        while time.perf_counter() < end:
            start = time.perf_counter()
            kernel.run("1+1")
            times.append((time.perf_counter() - start) * 1000)
    finally:
        stop.set()
        thread.join()
        kernel.delete()
    return times


def concurrent_creates(server, count):
    start = time.perf_counter()
    kernels = []

    def one(_):
        kernel = Kernel(server)
        kernel.run("1+1", until="result")
        return kernel

    with concurrent.futures.ThreadPoolExecutor(max_workers=count) as pool:
        kernels = list(pool.map(one, range(count)))
    elapsed = (time.perf_counter() - start) * 1000
    for kernel in kernels:
        kernel.delete()
    return elapsed


def sustained(server, seconds, workers):
    done = [0]
    stop_at = time.perf_counter() + seconds
    lock = threading.Lock()

    def worker():
        while time.perf_counter() < stop_at:
            kernel = Kernel(server)
            kernel.run("sum(i*i for i in range(1000))", until="result")
            kernel.delete()
            with lock:
                done[0] += 1

    start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done[0] / (time.perf_counter() - start)


def stateless_runs(server, seconds, workers):
    """cellbox's RL-reward path: POST /v1/run (a fresh pool sandbox runs a script, returns its
    exit code and output, and is destroyed). Returns (runs per second, latencies in ms)."""
    latencies = []
    stop_at = time.perf_counter() + seconds
    lock = threading.Lock()
    session = requests.Session()
    session.headers["Authorization"] = f"token {server.token}"
    body = {"language": "python", "code": "print(sum(i*i for i in range(1000)))"}

    def worker():
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            answer = session.post(server.base + "/v1/run", json=body, timeout=120).json()
            assert answer["exit_code"] == 0 and answer["stdout"].strip() == "332833500", answer
            with lock:
                latencies.append((time.perf_counter() - t0) * 1000)

    start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(latencies) / (time.perf_counter() - start), latencies


def native_api(server, count):
    """The native API's own latencies on one sandbox: an execution over the NDJSON stream
    (request to end_of_execution), and pause + resume (the cgroup freezer)."""
    session = requests.Session()
    session.headers["Authorization"] = f"token {server.token}"
    sandbox = session.post(server.base + "/v1/sandboxes", json={}).json()["id"]
    url = f"{server.base}/v1/sandboxes/{sandbox}"
    executes, pauses, resumes = [], [], []
    try:
        session.post(url + "/execute", json={"code": "0"}).content  # warm-up
        for _ in range(count):
            t0 = time.perf_counter()
            lines = session.post(url + "/execute", json={"code": "1+1"}).text.splitlines()
            executes.append((time.perf_counter() - t0) * 1000)
            assert json.loads(lines[-1])["type"] == "end_of_execution", lines
            t0 = time.perf_counter()
            assert session.post(url + "/pause").json()["state"] == "paused"
            pauses.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            assert session.post(url + "/resume").json()["state"] == "running"
            resumes.append((time.perf_counter() - t0) * 1000)
    finally:
        session.delete(url)
    return executes, pauses, resumes


E2B_CLIENT_DIR = os.path.join(REPO, "tests", "clients", "node")


def e2b_sdk_samples(server, runs):
    """E2B's SDK beside /v1, timed by one node process on one sandbox
    (tests/clients/node/e2b_bench.mjs): commands.run('true') vs /v1's command route, and a
    10 MiB files.write vs /v1's PUT .../files. Its raw samples, or {"ok": False, "error"}."""
    node = shutil.which("node")
    if node is None or not os.path.isdir(os.path.join(E2B_CLIENT_DIR, "node_modules", "e2b")):
        return {"ok": False, "error": "node or the npm packages of tests/clients/node are missing "
                                      "(scripts/install-deps.sh bench installs them)"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
    env.update(E2B_API_URL=server.base, E2B_SANDBOX_URL=server.base, E2B_API_KEY=server.token,
               CELLBOX_BENCH_RUNS=str(runs), CELLBOX_CLIENT_DEADLINE_MS="280000")
    proc = subprocess.run([node, "e2b_bench.mjs"], cwd=E2B_CLIENT_DIR, env=env, capture_output=True,
                          text=True, timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"ok": False, "error": f"no figures (exit {proc.returncode}): {proc.stderr[-2000:]}"}
    return json.loads(lines[-1])


def e2b_figures(raw):
    """p50/p99 of each path and the ratio E2B SDK / /v1 (1.0: the E2B path costs nothing more)."""
    if not raw.get("ok"):
        raise RuntimeError(f"the E2B bench client failed: {raw.get('error')}")

    def side_by_side(pair):
        sdk, v1 = pair["sdk_ms"], pair["v1_ms"]
        return {"e2b_sdk_p50": pct(sdk, 50), "e2b_sdk_p99": pct(sdk, 99), "v1_p50": pct(v1, 50),
                "v1_p99": pct(v1, 99), "ratio_p50": pct(sdk, 50) / pct(v1, 50),
                "ratio_p99": pct(sdk, 99) / pct(v1, 99), "runs": len(sdk)}

    return {"commands_run_true_ms": side_by_side(raw["commands"]),
            "file_write_10mib_ms": side_by_side(raw["files"])}


def busy_cpu_ms():
    """CPU time the whole host has been busy since boot (user, nice, system, interrupts)."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in f.readline().split()[1:8])
    return (user + nice + system + irq + softirq) * 1000 / os.sysconf("SC_CLK_TCK")


def sandbox_cpu_ms(kernel_id):
    """CPU charged so far to a cellbox sandbox's cgroup (pid 1 and the kernel), v1 or v2."""
    for path in glob.glob(f"/sys/fs/cgroup/**/kernel-{kernel_id}/cpuacct.usage", recursive=True):
        with open(path) as f:
            return int(f.read()) / 1e6
    for path in glob.glob(f"/sys/fs/cgroup/**/kernel-{kernel_id}/cpu.stat", recursive=True):
        with open(path) as f:
            return next(int(line.split()[1]) for line in f if line.startswith("usage_usec")) / 1e3
    return float("nan")


def cpu_per_kernel(server, count, is_cellbox):
    """The host's CPU (every process and the kernel threads working for them, /proc/stat) that one
    fresh kernel costs: created, run to its first result and deleted, one at a time on an
    otherwise idle server, less what the idle machine spends over the same time. Also, for
    cellbox, the part charged to the sandbox's own cgroup up to the first result. What the
    sustained rate and a burst of creates are bound by where the CPU is the limit (ms each)."""
    started, busy_at_start = time.perf_counter(), busy_cpu_ms()
    time.sleep(2)
    idle_rate = (busy_cpu_ms() - busy_at_start) / (time.perf_counter() - started)
    create = delete = inside = 0.0
    for _ in range(count):
        t0, b0 = time.perf_counter(), busy_cpu_ms()
        kernel = Kernel(server)
        kernel.run("1+1", until="result")
        t1, b1 = time.perf_counter(), busy_cpu_ms()
        if is_cellbox:
            inside += sandbox_cpu_ms(kernel.id)
        kernel.delete()
        time.sleep(0.5)  # the teardown: processes, namespaces, volume and cgroup
        t2, b2 = time.perf_counter(), busy_cpu_ms()
        create += (b1 - b0) - idle_rate * (t1 - t0)
        delete += (b2 - b1) - idle_rate * (t2 - t1)
    figures = {"create_to_first_result": create / count, "delete": delete / count,
               "ceiling_per_second": os.cpu_count() * 1000 / ((create + delete) / count)}
    if is_cellbox:
        figures["in_sandbox_to_first_result"] = inside / count
    return figures


def uss_of(pid):
    """Unique set size: private pages of the process (smaps_rollup)."""
    total = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1]) * 1024
    return total


def rss_of(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def descendants(root):
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            out.append(child)
            todo.append(child)
    return out


def idle_memory(server, count, is_cellbox):
    """Per idle kernel with pandas imported: USS of its processes (the kernel and, for cellbox,
    the sandbox's pid 1), and RSS."""
    before = set(descendants(server.proc.pid))
    kernels = []
    for _ in range(count):
        kernel = Kernel(server)
        kernel.run("import pandas as pd; df = pd.DataFrame({'a': range(10)}); df.head()")
        kernels.append(kernel)
    time.sleep(1)
    if is_cellbox:  # exactly the sandboxes' processes, from their cgroups (not the warm pool's)
        new = []
        for kernel in kernels:
            for procs in glob.glob(f"/sys/fs/cgroup/**/kernel-{kernel.id}/cgroup.procs", recursive=True)[:1]:
                with open(procs) as f:
                    new += [int(line) for line in f if line.strip()]
    else:
        new = [pid for pid in descendants(server.proc.pid) if pid not in before]
    per_kernel_uss = sum(uss_of(pid) for pid in new) / count
    per_kernel_rss = max((rss_of(pid) for pid in new), default=0)
    for kernel in kernels:
        kernel.delete()
    return per_kernel_uss / 2**20, per_kernel_rss / 2**20


def host_page_costs():
    """What this host charges per page for a new process's page-table work (bench/pagecost.c):
    the start-up figures depend on it more than on anything of ours."""
    program = os.path.join(REPO, "build", "bench", "pagecost")
    try:
        return json.loads(subprocess.run([program], capture_output=True, text=True, timeout=60,
                                         check=True).stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as error:
        return {"unavailable": str(error)}


def pid_alive(pid):
    """Running (a zombie waiting to be reaped has ended)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return "\nState:\tZ" not in f.read()
    except OSError:
        return False


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def sandbox_pids(ids):
    """Every process in these sandboxes' cgroups (the first hierarchy that has each)."""
    pids = set()
    for sandbox in ids:
        for procs in glob.glob(f"/sys/fs/cgroup/**/kernel-{sandbox}/cgroup.procs", recursive=True)[:1]:
            with open(procs) as f:
                pids |= {int(line) for line in f if line.strip()}
    return pids


def v1_stdout(session, base, sandbox, code):
    lines = session.post(f"{base}/v1/sandboxes/{sandbox}/execute", json={"code": code}, timeout=120).text
    events = [json.loads(line) for line in lines.splitlines() if line.strip()]
    assert events and events[-1]["type"] == "end_of_execution", events
    assert not any(e["type"] == "error" for e in events), events
    return "".join(e["text"] for e in events if e["type"] == "stdout")


def adopt(data_dir, token, ids, paused, expected):
    """Starts a cellboxd on data_dir (whose sandboxes a previous one left) and times, from the
    spawn, its port answering and GET /v1/sandboxes listing every sandbox; then the first cell on
    an adopted sandbox, checking every sandbox's variable and the paused one's state."""
    port = free_port()
    t0 = time.perf_counter()
    server = Server("cellbox", cellbox_argv(data_dir, 0, port, token), port, token, poll=0.005)
    try:
        to_port = (time.perf_counter() - t0) * 1000
        while True:
            listed = {s["id"]: s["state"] for s in server.http.get(server.base + "/v1/sandboxes").json()}
            if set(listed) == set(ids):
                break
            if time.perf_counter() - t0 > 60:
                raise AssertionError(f"adopted {len(listed)} of {len(ids)} sandboxes: {listed}")
            time.sleep(0.005)
        to_listed = (time.perf_counter() - t0) * 1000
        assert listed[paused] == "paused", listed[paused]
        assert all(state == "running" for sandbox, state in listed.items() if sandbox != paused), listed
        running = [sandbox for sandbox in ids if sandbox != paused]
        t1 = time.perf_counter()
        first = v1_stdout(server.http, server.base, running[0], "print(v)")
        first_ms = (time.perf_counter() - t1) * 1000
        assert first.strip() == expected[running[0]], (first, expected[running[0]])
        rtts = []
        for sandbox in running[1:]:
            t1 = time.perf_counter()
            out = v1_stdout(server.http, server.base, sandbox, "print(v)")
            rtts.append((time.perf_counter() - t1) * 1000)
            assert out.strip() == expected[sandbox], (sandbox, out, expected[sandbox])
        figures = {"spawn_to_port_ms": to_port, "spawn_to_all_listed_ms": to_listed,
                   "first_cell_on_adopted_ms": first_ms,
                   "first_cell_on_each_other_adopted_p50_ms": pct(rtts, 50) if rtts else None,
                   "variables_checked": len(running), "paused_kept_paused": True,
                   "daemon_rss_mib": rss_of(server.proc.pid) / 2**20, "daemon_fds": fd_count(server.proc.pid)}
        return server, figures
    except BaseException:
        server.stop()
        raise


def cellbox_restart(root, count):
    """`count` /v1 sandboxes, each with a variable set by a cell, one of them paused; cellboxd
    killed with SIGKILL, a new one adopts them (timed); that one stopped with SIGUSR2 (a restart
    for an upgrade), a third adopts them (timed); a plain SIGTERM then ends the sandboxes and the
    keeper, which is checked by pid. Nothing of the benchmark's is left behind, whatever fails."""
    data_dir = os.path.join(root, "cb-restart")
    server = start_cellbox(data_dir, pool_size=0)
    token = server.token
    keeper, watched, figures = None, set(), {"sandboxes": count}
    try:
        session = server.http
        ids, expected = [], {}
        for i in range(count):
            sandbox = session.post(server.base + "/v1/sandboxes", json={"timeout_s": 0}).json()["id"]
            ids.append(sandbox)
            expected[sandbox] = str(i * 1000 + 7)
            v1_stdout(session, server.base, sandbox, f"v = {i} * 1000 + 7")
        paused = ids[-1]
        assert session.post(f"{server.base}/v1/sandboxes/{paused}/pause").json()["state"] == "paused"
        with open(os.path.join(data_dir, "keeper.pid")) as f:
            keeper = int(f.read())
        watched = sandbox_pids(ids)
        assert len(watched) >= count, (len(watched), count)
        figures["before"] = {"daemon_rss_mib": rss_of(server.proc.pid) / 2**20,
                             "daemon_fds": fd_count(server.proc.pid),
                             "sandbox_processes": len(watched)}
        # kill -9: nothing of the daemon's shutdown runs
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait()
        assert pid_alive(keeper), "the keeper died with the daemon"
        server, figures["after_kill_9"] = adopt(data_dir, token, ids, paused, expected)
        # SIGUSR2: a restart for an upgrade; the daemon leaves the sandboxes and exits
        t0 = time.perf_counter()
        os.kill(server.proc.pid, signal.SIGUSR2)
        assert server.proc.wait(timeout=60) == 0
        stop_ms = (time.perf_counter() - t0) * 1000
        server, figures["after_sigusr2"] = adopt(data_dir, token, ids, paused, expected)
        figures["after_sigusr2"]["old_daemon_exit_ms"] = stop_ms
        # the paused sandbox resumes with its state
        assert server.http.post(f"{server.base}/v1/sandboxes/{paused}/resume").json()["state"] == "running"
        assert v1_stdout(server.http, server.base, paused, "print(v)").strip() == expected[paused]
        assert all(pid_alive(pid) for pid in watched), "a sandbox process died across the restarts"
    finally:
        # a plain stop ends every sandbox and then the keeper; checked by pid
        t0 = time.perf_counter()
        server.stop()
        deadline = time.time() + 20
        while time.time() < deadline and ((keeper and pid_alive(keeper)) or any(map(pid_alive, watched))):
            time.sleep(0.05)
        left = [pid for pid in watched if pid_alive(pid)] + ([keeper] if keeper and pid_alive(keeper) else [])
        for pid in left:  # only if the stop failed: ours, by pid
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        figures["sigterm_stop_to_nothing_left_ms"] = (time.perf_counter() - t0) * 1000
        figures["left_after_stop"] = left
    assert not left, f"left after SIGTERM: pids {left}"
    return figures


def jupyter_restart(root):
    """Jupyter Server with a kernel holding a variable, killed with SIGKILL and started again on
    the same root and runtime dir: is the kernel still listed? (ipykernel is left an orphan the new
    server does not know; it is stopped here by pid.) Also SIGTERM: the server shuts its kernels
    down. Times spawn to the new server answering /api/kernels."""
    jupyter = start_jupyter(os.path.join(root, "jupyter-restart"))
    figures = {}
    orphans = []
    try:
        kernel = Kernel(jupyter)
        kernel.run("v = 42")
        kernel_pids = descendants(jupyter.proc.pid)
        kernel.ws.close()
        os.kill(jupyter.proc.pid, signal.SIGKILL)
        jupyter.proc.wait()
        orphans = [pid for pid in kernel_pids if pid_alive(pid)]
        t0 = time.perf_counter()
        jupyter = start_jupyter(os.path.join(root, "jupyter-restart"), ready_after=0, poll=0.005)
        listed = [k["id"] for k in jupyter.http.get(jupyter.base + "/api/kernels").json()]
        spawn_to_answer = (time.perf_counter() - t0) * 1000
        reached = jupyter.http.get(jupyter.base + f"/api/kernels/{kernel.id}").status_code
        figures["after_kill_9"] = {"kernel_listed": kernel.id in listed, "kernels_listed": len(listed),
                                   "get_kernel_status": reached,
                                   "orphaned_kernel_processes": len(orphans),
                                   "spawn_to_kernels_listed_ms": spawn_to_answer}
        assert kernel.id not in listed
        # SIGTERM (a clean restart): the server shuts its kernels down first
        kernel = Kernel(jupyter)
        kernel.run("v = 42")
        jupyter.stop()
        jupyter = start_jupyter(os.path.join(root, "jupyter-restart"))
        listed = [k["id"] for k in jupyter.http.get(jupyter.base + "/api/kernels").json()]
        figures["after_sigterm"] = {"kernel_listed": kernel.id in listed, "kernels_listed": len(listed)}
        figures["behaviour"] = "kernels lost on restart: none is listed or reachable by the new server, their variables gone"
    finally:
        jupyter.stop()
        for pid in orphans:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    return figures


def restart_figures(root, count):
    return {"cellbox": cellbox_restart(root, count), "jupyter": jupyter_restart(root)}


# A download from inside a namespace: bytes read in 1 MiB chunks and thrown away, so the figure is
# the network's and the server's, not a copy into one big buffer.
DOWNLOAD = """import sys, time, urllib.request
start = time.monotonic(); total = 0
with urllib.request.urlopen(sys.argv[1], timeout=60) as answer:
    while chunk := answer.read(1 << 20):
        total += len(chunk)
print(total, time.monotonic() - start)
"""

# The same download as a cell in a networked sandbox: its value is "bytes seconds".
DOWNLOAD_CELL = """import time, urllib.request
_start = time.monotonic(); _total = 0
with urllib.request.urlopen({url!r}, timeout=60) as _answer:
    while _chunk := _answer.read(1 << 20):
        _total += len(_chunk)
f"{{_total}} {{time.monotonic() - _start}}"
"""


def throughput(received, seconds, expected):
    if int(received) != expected:
        raise RuntimeError(f"download got {received} of {expected} bytes")
    return int(received) / float(seconds) / (1 << 20)


def network_create_figures(server, samples):
    """Create -> first result with network on beside off, alternating, on one daemon with no
    warm pool: both sides take the path of an empty pool (a prepared set, a clone of the zygote)
    and differ by the network alone."""
    on, off = [], []
    for _ in range(samples):
        off += create_to_first_result(server, 1, 0.3)
        on += create_to_first_result(server, 1, 0.3, env={"KERNEL_CELLBOX_NETWORK": "1"})
    # Each pair ran back to back: the median of their differences is steadier on a shared
    # machine than the difference of two medians.
    paired = statistics.median(b - a for a, b in zip(off, on))
    return {"path": "pool empty (prepared set + zygote clone) for both", "samples": samples,
            "off_p50": pct(off, 50), "off_p95": pct(off, 95), "on_p50": pct(on, 50),
            "on_p95": pct(on, 95), "ratio_p50": pct(on, 50) / pct(off, 50),
            "paired_difference_p50_ms": paired}


def network_warm_create_figures(server, pool_size, samples):
    """Create -> first result with network on beside off, alternating, on one daemon with a warm
    pool, each create after the pool refilled: both take a pooled kernel (model/manager.c), and
    the networked one is given its interface as it is handed out."""
    on, off = [], []
    for _ in range(samples):
        off += create_to_first_result(server, 1, 0.3, pool_size=pool_size)
        on += create_to_first_result(server, 1, 0.3, pool_size=pool_size,
                                     env={"KERNEL_CELLBOX_NETWORK": "1"})
    paired = statistics.median(b - a for a, b in zip(off, on))
    return {"path": f"warm pool (--pool-size {pool_size}, refilled before each create) for both",
            "samples": samples, "off_p50": pct(off, 50), "off_p95": pct(off, 95),
            "on_p50": pct(on, 50), "on_p95": pct(on, 95), "ratio_p50": pct(on, 50) / pct(off, 50),
            "paired_difference_p50_ms": paired}


def network_download_figures(server, internet, runs):
    """HTTP download throughput from the test web server into a real networked sandbox (its veth,
    the daemon's nftables table, NAT) beside the host's own download of the same file."""
    host, sandbox = [], []
    kernel = Kernel(server, {"KERNEL_CELLBOX_NETWORK": "1"})
    try:
        for _ in range(runs):
            done = subprocess.run(["/usr/bin/python3", "-c", DOWNLOAD, internet.big_file_url],
                                  capture_output=True, text=True, timeout=120)
            if done.returncode != 0:
                raise RuntimeError(f"the host's download failed: {done.stderr[-2000:]}")
            host.append(throughput(*done.stdout.split(), internet.big_file_bytes))
            answer = kernel.run(DOWNLOAD_CELL.format(url=internet.big_file_url), until="result")
            if answer["msg_type"] != "execute_result":
                raise RuntimeError(f"the sandbox's download failed: {answer}")
            value = answer["content"]["data"]["text/plain"].strip("'\"")
            sandbox.append(throughput(*value.split(), internet.big_file_bytes))
    finally:
        kernel.delete()
    return {"file_mib": internet.big_file_bytes / (1 << 20), "runs": runs,
            "host_p50": pct(host, 50), "host_min": min(host), "host_max": max(host),
            "sandbox_p50": pct(sandbox, 50), "sandbox_min": min(sandbox),
            "sandbox_max": max(sandbox), "ratio_p50": pct(sandbox, 50) / pct(host, 50)}


WARM_POOL_SIZE = 2  # the daemon's default --pool-size


def network_figures(runs, create_samples=60):
    """A real networked cellbox sandbox: create with network on beside off, and HTTP download
    throughput from the tests' own web server (tests/helpers/test_internet.py) beside the
    host's."""
    if os.geteuid() != 0:
        return {"not_measured": "the test internet needs root (network namespaces and veths)"}
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from helpers.network_ranges import unrouted_range
    from helpers.test_internet import small_internet
    tmp = tempfile.mkdtemp(prefix="cellbox-bench-net-")
    try:
        server = start_cellbox(os.path.join(tmp, "cb"), 0,
                               extra=("--allow-network", "--network-range", str(unrouted_range())))
        try:
            figures = {"create_to_first_result_network_on_vs_off_ms":
                       network_create_figures(server, create_samples)}
            with small_internet() as internet:
                figures["download_from_test_web_server_mib_per_s"] = network_download_figures(
                    server, internet, runs)
        finally:
            server.stop()
        warm = start_cellbox(os.path.join(tmp, "cb-warm"), WARM_POOL_SIZE,
                             extra=("--allow-network", "--network-range", str(unrouted_range())))
        try:
            figures["create_to_first_result_warm_pool_network_on_vs_off_ms"] = \
                network_warm_create_figures(warm, WARM_POOL_SIZE, create_samples)
        finally:
            warm.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return figures


# ---- templates (issue 22): a template built from a Dockerfile, beside python3

E2B_WALKTHROUGH_BUILD_S = 119.0  # `e2b template build` of RUN pip install cowsay: 1 min 59 s
BENCH_TEMPLATE = "bench-pip"
BASE_PRELOAD = "numpy,pandas,matplotlib,IPython"  # python3's: the template adds its package


def template_dockerfile(internet):
    """E2B's walkthrough Dockerfile, its index the tests' own (helpers/test_internet.py)."""
    index = internet.index_url.split("/")[2]
    return (f"FROM e2bdev/code-interpreter:latest\n"
            f"RUN pip install --index-url {internet.index_url} --trusted-host {index} "
            f"{internet.wheel_project}\n")


def build_template(server, name, dockerfile, preload, pool_size, network, replace=False):
    """POST /v1/templates and its NDJSON to the end: seconds from the request to the last line,
    the seconds and cached steps the daemon reports, and the steps."""
    body = {"name": name, "dockerfile": dockerfile, "preload": preload, "pool_size": pool_size,
            "network": network, "replace": replace}
    started = time.perf_counter()
    response = server.http.post(server.base + "/v1/templates", json=body, stream=True, timeout=600)
    if response.status_code != 200:
        raise RuntimeError(f"POST /v1/templates: {response.status_code} {response.text[:2000]}")
    lines = [json.loads(line) for line in response.iter_lines() if line]
    elapsed = time.perf_counter() - started
    last = lines[-1] if lines else {}
    if last.get("type") != "done":
        output = "".join(line.get("text", "") for line in lines if line.get("type") == "output")
        raise RuntimeError(f"the build failed: {last}\n{output[-2000:]}")
    steps = [line for line in lines if line.get("type") == "step"]
    return {"seconds": elapsed, "daemon_seconds": last.get("seconds"),
            "steps": len(steps), "cached_steps": last.get("cached_steps"),
            "template": last.get("template")}


def wait_template_ready(server, name, pool_size, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        state = template_state(server, name)
        if state.get("zygote_ready") and state.get("warm_pool_ready", 0) >= pool_size:
            return
        time.sleep(0.1)
    raise RuntimeError(f"template {name} not ready after {timeout} s: {state}")


def pss_of(pid):
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


def zygote_memory(server, preload):
    """PSS and RSS (MiB) of the zygote that preloads exactly `preload` (its --preload=)."""
    for pid in descendants(server.proc.pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"--zygote" in argv and f"--preload={preload}".encode() in argv:
            return {"pss": pss_of(pid) / 2**20, "rss": rss_of(pid) / 2**20}
    return {"not_found": f"no zygote with --preload={preload}"}


def idle_kernels_memory(server, name, count, cell):
    """Per idle kernel of template `name` after `cell`: USS, PSS and RSS (MiB) of the sandbox's
    processes (its cgroup's: the kernel and the sandbox's pid 1), the mean over `count`."""
    kernels = []
    try:
        for _ in range(count):
            kernel = Kernel(server, name=name)
            kernel.run(cell)
            kernels.append(kernel)
        time.sleep(1)
        uss = pss = rss = 0
        for kernel in kernels:
            for procs in glob.glob(f"/sys/fs/cgroup/**/kernel-{kernel.id}/cgroup.procs", recursive=True)[:1]:
                with open(procs) as f:
                    for pid in (int(line) for line in f if line.strip()):
                        uss, pss, rss = uss + uss_of(pid), pss + pss_of(pid), rss + rss_of(pid)
        return {"uss": uss / count / 2**20, "pss": pss / count / 2**20, "rss": rss / count / 2**20,
                "kernels": count}
    finally:
        for kernel in kernels:
            kernel.delete()


def alternating_creates(server, names, samples, pool_sizes=None):
    """Create -> first result for each template of `names` in turn, `samples` rounds (after the
    pool refilled when pool_sizes says it has one). {name: [ms, ...]}."""
    times = {name: [] for name in names}
    for _ in range(samples):
        for name in names:
            times[name] += create_to_first_result(server, 1, 0.2, (pool_sizes or {}).get(name, 0),
                                                  name=name)
    return times


def side_by_side(times, template):
    return {"python3_p50": pct(times["python3"], 50), "python3_p95": pct(times["python3"], 95),
            "template_p50": pct(times[template], 50), "template_p95": pct(times[template], 95),
            "ratio_p50": pct(times[template], 50) / pct(times["python3"], 50),
            "samples": len(times[template])}


def template_layer_dirs(data_dir, model):
    """The template's layers, top first, from its model's "layers" (bottom to top)."""
    return [os.path.join(data_dir, "templates", "layers", key) for key in reversed(model.get("layers", []))]


def templates_figures(create_samples, memory_kernels, usr_runs):
    """A template built from E2B's walkthrough Dockerfile (RUN pip install from the tests' own
    index), cached rebuild, pool-empty and warm creates beside python3's, the memory of its
    zygote and idle kernels beside python3's, and its /usr as an overlay or an image; these on
    daemons with --template-zygotes (a zygote in the template's view). Last, pool-empty creates
    on a daemon without it, the default: the template's kernels start by exec."""
    if os.geteuid() != 0:
        return {"not_measured": "the test internet needs root (network namespaces and veths)"}
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from helpers.network_ranges import unrouted_range
    from helpers.test_internet import INDEX_ADDRESS, small_internet
    import usr_view
    network = {"allowOut": [INDEX_ADDRESS], "denyOut": ["0.0.0.0/0"]}
    tmp = tempfile.mkdtemp(prefix="cellbox-bench-tpl-", dir="/var/tmp")  # ext4: overlay uppers
    figures = {"e2b_walkthrough_build_s": E2B_WALKTHROUGH_BUILD_S}
    try:
        with small_internet(big_file_bytes=1 << 20) as internet:
            dockerfile = template_dockerfile(internet)
            preload = f"{BASE_PRELOAD},{internet.wheel_package}"
            figures["dockerfile"] = dockerfile
            data_dir = os.path.join(tmp, "cb-cold")
            # --template-zygotes: the template's kernels are clones of its own zygote, as python3's
            networked = ("--allow-network", "--network-range", str(unrouted_range()),
                         "--template-zygotes")
            server = start_cellbox(data_dir, 0, extra=networked)
            try:
                built = build_template(server, BENCH_TEMPLATE, dockerfile, preload, 0, network)
                model = built.pop("template")
                again = build_template(server, BENCH_TEMPLATE, dockerfile, preload, 0, network,
                                       replace=True)
                again.pop("template")
                figures["build_pip_install_s"] = dict(
                    built, e2b_walkthrough_s=E2B_WALKTHROUGH_BUILD_S,
                    e2b_over_cellbox=E2B_WALKTHROUGH_BUILD_S / built["seconds"])
                figures["cached_rebuild_s"] = again
                figures["template"] = {key: model.get(key) for key in
                                       ("size_bytes", "layers", "packages", "preload")}
                wait_template_ready(server, BENCH_TEMPLATE, 0)
                figures["create_to_first_result_pool_empty_ms"] = side_by_side(
                    alternating_creates(server, ["python3", BENCH_TEMPLATE], create_samples),
                    BENCH_TEMPLATE)
                figures["zygote_memory_mib"] = {"python3": zygote_memory(server, BASE_PRELOAD),
                                                "template": zygote_memory(server, preload)}
                cell = f"import {internet.wheel_package}, pandas"
                figures["idle_kernel_memory_mib"] = {
                    "cell": cell,
                    "python3": idle_kernels_memory(server, "python3", memory_kernels, "import pandas"),
                    "template": idle_kernels_memory(server, BENCH_TEMPLATE, memory_kernels, cell)}
                figures["usr_overlay_vs_image"] = usr_view.compare(
                    template_layer_dirs(data_dir, model), f"{internet.wheel_package},numpy",
                    tmp, usr_runs)
            finally:
                server.stop()
            warm = start_cellbox(os.path.join(tmp, "cb-warm"), WARM_POOL_SIZE,
                                 extra=networked[:1] + ("--network-range", str(unrouted_range()),
                                                        "--template-zygotes"))
            try:
                second = build_template(warm, BENCH_TEMPLATE, dockerfile, preload, WARM_POOL_SIZE,
                                        network)
                second.pop("template")
                figures["build_pip_install_s"]["second_daemon_s"] = second["seconds"]
                wait_template_ready(warm, BENCH_TEMPLATE, WARM_POOL_SIZE)
                pools = {"python3": WARM_POOL_SIZE, BENCH_TEMPLATE: WARM_POOL_SIZE}
                figures["create_to_first_result_warm_pool_ms"] = side_by_side(
                    alternating_creates(warm, ["python3", BENCH_TEMPLATE], create_samples, pools),
                    BENCH_TEMPLATE)
            finally:
                warm.stop()
            # the default: no zygote for a template with files, its kernels start by exec
            plain = start_cellbox(os.path.join(tmp, "cb-exec"), 0,
                                  extra=networked[:1] + ("--network-range", str(unrouted_range())))
            try:
                build_template(plain, BENCH_TEMPLATE, dockerfile, preload, 0, network)
                figures["create_to_first_result_pool_empty_without_template_zygotes_ms"] = side_by_side(
                    alternating_creates(plain, ["python3", BENCH_TEMPLATE], max(3, create_samples // 3)),
                    BENCH_TEMPLATE)
            finally:
                plain.stop()
    finally:
        remove_unmounted(tmp)
    return figures


# The languages figure: each language's kernelspec, how /v1 names it, and a trivial cell in it.
LANGUAGES = [("python3", "python", "1+1"), ("javascript", "javascript", "1+1"),
             ("typescript", "typescript", "1+1"), ("bash", "bash", "echo 2"), ("ir", "r", "1+1")]


def median_ms(samples):
    return round(statistics.median(samples), 3) if samples else None


def kernel_first_results(server, name, code, count):
    """Create -> first result through the Kernel Gateway: POST /api/kernels {name}, the
    WebSocket, one cell to its idle (bash and IRkernel show no execute_result); ms each."""
    times = []
    for _ in range(count):
        start = time.perf_counter()
        kernel = Kernel(server, name=name)
        kernel.run(code)
        times.append((time.perf_counter() - start) * 1000)
        kernel.delete()
        time.sleep(0.1)
    return times


def kernel_round_trips(server, name, code, count):
    kernel = Kernel(server, name=name)
    try:
        for _ in range(5):
            kernel.run(code)
        times = []
        for _ in range(count):
            start = time.perf_counter()
            kernel.run(code)
            times.append((time.perf_counter() - start) * 1000)
        return times
    finally:
        kernel.delete()


def context_first_results(server, language, code, count):
    """A context of `language` in a sandbox that exists (POST /v1/sandboxes/{id}/contexts, then
    /v1 execute in it to end_of_execution); ms each, the context deleted after each sample."""
    session = requests.Session()
    session.headers["Authorization"] = f"token {server.token}"
    sandbox = session.post(server.base + "/v1/sandboxes", json={"timeout_s": 0}).json()["id"]
    url = f"{server.base}/v1/sandboxes/{sandbox}"
    times = []
    try:
        session.post(url + "/execute", json={"code": "0"}).content  # the sandbox is up
        for _ in range(count):
            start = time.perf_counter()
            response = session.post(url + "/contexts", json={"language": language})
            response.raise_for_status()
            context = response.json()["id"]
            lines = session.post(url + "/execute", json={"code": code, "context_id": context}).text.splitlines()
            times.append((time.perf_counter() - start) * 1000)
            assert json.loads(lines[-1])["type"] == "end_of_execution", lines
            assert not any(json.loads(line).get("type") == "error" for line in lines), lines
            session.delete(f"{url}/contexts/{context}")
            time.sleep(0.1)
    finally:
        session.delete(url)
    return times


def languages_figures(root, samples, round_trip_count):
    """Per language (python, javascript, typescript, bash, r): create -> first result of a new
    sandbox of that kernelspec through the Kernel Gateway (no warm pool), a context of it in a
    sandbox that exists (/v1), and a trivial cell's round trip (medians); beside Jupyter Server
    running the same kernel where Debian has one (ipykernel, IRkernel), in the same run, as
    ratios (Jupyter's time / cellbox's). A language this daemon does not offer is skipped."""
    figures = {}
    cellbox = start_cellbox(os.path.join(root, "cb-languages"), pool_size=0)
    try:
        offered = cellbox.http.get(cellbox.base + "/api/kernelspecs").json()["kernelspecs"]
        for name, language, code in LANGUAGES:
            if name not in offered:
                figures[language] = {"skipped": f"no kernelspec {name} on this daemon"}
                continue
            figures[language] = {
                "kernelspec": name,
                "create_to_first_result_pool_empty_ms": median_ms(
                    kernel_first_results(cellbox, name, code, samples)),
                "context_to_first_result_ms": median_ms(
                    context_first_results(cellbox, language, code, samples)),
                "round_trip_ms": median_ms(kernel_round_trips(cellbox, name, code, round_trip_count)),
            }
    finally:
        cellbox.stop()
    jupyter = start_jupyter(os.path.join(root, "jupyter-languages"))
    try:
        offered = jupyter.http.get(jupyter.base + "/api/kernelspecs").json()["kernelspecs"]
        for name, language, code in LANGUAGES:
            mine = figures.get(language, {})
            if name not in offered or "skipped" in mine:
                continue
            first = median_ms(kernel_first_results(jupyter, name, code, max(2, samples // 2)))
            trip = median_ms(kernel_round_trips(jupyter, name, code, round_trip_count))
            mine.update({"jupyter_create_to_first_result_ms": first, "jupyter_round_trip_ms": trip,
                         "ratio_create_to_first_result": round(first / mine["create_to_first_result_pool_empty_ms"], 2),
                         "ratio_round_trip": round(trip / mine["round_trip_ms"], 2)})
    finally:
        jupyter.stop()
    return figures


def remove_unmounted(root):
    """Removes root, after unmounting whatever a daemon left mounted under it (deepest first),
    so that nothing is removed through a mount."""
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    for point in sorted((p for p in points if p.startswith(root + "/")), key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], capture_output=True, timeout=30)
    shutil.rmtree(root, ignore_errors=True)


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def save_figures_run_alone(name, figures):
    """Figures of one `--only` run: written to bench/results/<name>-latest.json (latest.json
    stays the full run's) and printed."""
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, f"{name}-latest.json"), "w") as f:
        json.dump(figures, f, indent=2)
    print(json.dumps(figures, indent=2))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer samples (CI smoke run)")
    parser.add_argument("--idle", type=int, default=500, help="idle sandboxes for the memory figure")
    parser.add_argument("--only", choices=["restart", "e2b", "network", "templates", "languages", "checkpoints"], help="run this figure alone (written to "
                        "bench/results/<name>-latest.json, latest.json untouched)")
    parser.add_argument("--sandboxes", type=int, default=50, help="sandboxes kept across the restarts")
    args = parser.parse_args()
    n = 10 if args.quick else 40
    tmp = tempfile.mkdtemp(prefix="cellbox-bench-")
    if args.only == "restart":
        try:
            figures = {"machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                                   "python": platform.python_version()},
                       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "restart_adoption": restart_figures(tmp, args.sandboxes)}
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        save_figures_run_alone("restart", figures)
        return 0
    if args.only == "network":
        shutil.rmtree(tmp, ignore_errors=True)  # network_figures makes its own
        figures = {"machine": {"cpus": os.cpu_count(), "kernel": platform.release()},
                   "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   "network": network_figures(3 if args.quick else 10, 8 if args.quick else 60)}
        save_figures_run_alone("network", figures)
        return 0
    if args.only == "templates":
        shutil.rmtree(tmp, ignore_errors=True)  # templates_figures makes its own
        figures = {"machine": {"cpus": os.cpu_count(), "kernel": platform.release()},
                   "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   "templates": templates_figures(8 if args.quick else 30, 3 if args.quick else 8,
                                                  3 if args.quick else 7)}
        save_figures_run_alone("templates", figures)
        return 0
    if args.only == "languages":
        try:
            figures = {"machine": {"cpus": os.cpu_count(), "kernel": platform.release()},
                       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "languages": languages_figures(tmp, 3 if args.quick else 10,
                                                      20 if args.quick else 100)}
        finally:
            remove_unmounted(tmp)
        save_figures_run_alone("languages", figures)
        return 0
    if args.only == "checkpoints":
        try:
            figures = {"machine": {"cpus": os.cpu_count(), "kernel": platform.release()},
                       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "checkpoints": checkpoints.checkpoint_figures(start_cellbox, tmp,
                                                                     3 if args.quick else 8)}
        finally:
            remove_unmounted(tmp)
        save_figures_run_alone("checkpoints", figures)
        return 0
    if args.only == "e2b":
        try:
            cellbox = start_cellbox(os.path.join(tmp, "cb-e2b"), pool_size=4)
            try:
                figures = {"machine": {"cpus": os.cpu_count(), "kernel": platform.release()},
                           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                           "e2b_sdk_vs_v1": e2b_figures(e2b_sdk_samples(cellbox, n))}
            finally:
                cellbox.stop()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        save_figures_run_alone("e2b", figures)
        return 0
    figures = {}
    page_costs = host_page_costs()
    try:
        jupyter = start_jupyter(os.path.join(tmp, "jupyter"))
        try:
            j_first = create_to_first_result(jupyter, max(3, n // 4), 0.2)
            time.sleep(2)  # as for cellbox below: an idle server
            j_rtt = round_trips(jupyter, n * 5)
            j_cell = round_trips(jupyter, n * 2, ANALYSIS_CELL)
            j_concurrent = concurrent_creates(jupyter, 10)
            j_busy_rtt = round_trips_while_creating(jupyter, 10 if not args.quick else 5)
            j_sustained = sustained(jupyter, 10 if not args.quick else 5, 2)
            j_cpu = cpu_per_kernel(jupyter, 3 if args.quick else 8, False)
            j_uss, j_rss = idle_memory(jupyter, 4, False)
        finally:
            jupyter.stop()
        cellbox = start_cellbox(os.path.join(tmp, "cb-pool"), pool_size=4)
        try:
            c_first = create_to_first_result(cellbox, n, 0.1, pool_size=4)
            # The round trip of an idle server: not while the pool refills and the deleted
            # sandboxes' volumes and cgroups are still being taken down.
            wait_pool(cellbox, 4)
            time.sleep(2)
            c_rtt = round_trips(cellbox, n * 25)  # 1 ms each: more samples, a steadier p50
            c_cell = round_trips(cellbox, n * 2, ANALYSIS_CELL)
            c_busy_rtt = round_trips_while_creating(cellbox, 10 if not args.quick else 5)
            c_sustained = sustained(cellbox, 10 if not args.quick else 5, 2)
            c_runs, c_run_ms = stateless_runs(cellbox, 10 if not args.quick else 5, 2)
            c_exec_ms, c_pause_ms, c_resume_ms = native_api(cellbox, n)
            c_e2b = e2b_figures(e2b_sdk_samples(cellbox, n))
            c_concurrent = concurrent_creates(cellbox, 100)
            c_uss, c_rss = idle_memory(cellbox, args.idle, True)
        finally:
            cellbox.stop()
        cold = start_cellbox(os.path.join(tmp, "cb-cold"), pool_size=0)
        try:
            c_cold = create_to_first_result(cold, n // 2, 0.2)
            c_cpu = cpu_per_kernel(cold, n // 2, True)
        finally:
            cold.stop()
        # A burst the pool is sized for: 100 concurrent creates against --pool-size 100.
        burst_server = start_cellbox(os.path.join(tmp, "cb-burst"), pool_size=100)
        try:
            bursts = []
            for _ in range(3):
                bursts.append(concurrent_creates(burst_server, 100))
                wait_pool(burst_server, 100, timeout=180)
        finally:
            burst_server.stop()
        restart = restart_figures(tmp, args.sandboxes if not args.quick else 10)
        network = network_figures(3 if args.quick else 10, 8 if args.quick else 60)
        templates = templates_figures(8 if args.quick else 30, 3 if args.quick else 8,
                                      3 if args.quick else 7)
        languages = languages_figures(tmp, 3 if args.quick else 10, 20 if args.quick else 100)
        checkpoint = checkpoints.checkpoint_figures(start_cellbox, tmp, 3 if args.quick else 8)
        figures = {
            "machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                        "python": platform.python_version(), "page_costs_us": page_costs},
            "create_to_first_result_warm_ms": {"cellbox_p50": pct(c_first, 50), "cellbox_p99": pct(c_first, 99),
                                               "jupyter_p50": pct(j_first, 50), "jupyter_p99": pct(j_first, 99),
                                               "ratio_p50": pct(j_first, 50) / pct(c_first, 50)},
            "create_to_first_result_pool_empty_ms": {"cellbox_p50": pct(c_cold, 50),
                                                     "ratio_p50": pct(j_first, 50) / pct(c_cold, 50)},
            "round_trip_ms": {"cellbox_p50": pct(c_rtt, 50), "jupyter_p50": pct(j_rtt, 50),
                              "ratio_p50": pct(j_rtt, 50) / pct(c_rtt, 50)},
            "round_trip_while_another_client_creates_ms": {
                "cellbox_p50": pct(c_busy_rtt, 50), "cellbox_p99": pct(c_busy_rtt, 99),
                "jupyter_p50": pct(j_busy_rtt, 50), "jupyter_p99": pct(j_busy_rtt, 99),
                "ratio_p99": pct(j_busy_rtt, 99) / pct(c_busy_rtt, 99)},
            "analysis_cell_round_trip_ms": {"lines": ANALYSIS_CELL.count("\n") + 1,
                                            "cellbox_p50": pct(c_cell, 50), "jupyter_p50": pct(j_cell, 50),
                                            "ratio_p50": pct(j_cell, 50) / pct(c_cell, 50)},
            "concurrent_creates_ms": {"cellbox_100": c_concurrent, "jupyter_10": j_concurrent,
                                      "cellbox_100_pool_100_median": statistics.median(bursts),
                                      "cellbox_100_pool_100_runs": bursts},
            "sustained_per_second": {"cellbox": c_sustained, "jupyter": j_sustained,
                                     "ratio": c_sustained / max(j_sustained, 1e-9)},
            "cpu_per_fresh_kernel_ms": {"cellbox": c_cpu, "jupyter": j_cpu,
                                        "ratio": sum(j_cpu[k] for k in ("create_to_first_result", "delete"))
                                        / sum(c_cpu[k] for k in ("create_to_first_result", "delete"))},
            "stateless_run": {"cellbox_per_second": c_runs, "cellbox_p50_ms": pct(c_run_ms, 50),
                              "cellbox_p99_ms": pct(c_run_ms, 99), "jupyter_per_second": j_sustained,
                              "ratio": c_runs / max(j_sustained, 1e-9)},
            "native_api_ms": {"execute_p50": pct(c_exec_ms, 50), "execute_p99": pct(c_exec_ms, 99),
                              "pause_p50": pct(c_pause_ms, 50), "resume_p50": pct(c_resume_ms, 50)},
            "e2b_sdk_vs_v1": c_e2b,
            "idle_kernel_memory_mib": {"cellbox_uss": c_uss, "cellbox_rss": c_rss, "cellbox_count": args.idle,
                                       "jupyter_uss": j_uss, "jupyter_rss": j_rss,
                                       "ratio_uss": j_uss / max(c_uss, 1e-9)},
            "restart_adoption": restart,
            "network": network,
            "templates": templates,
            "languages": languages,
            "checkpoints": checkpoint,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "latest.json"), "w") as f:
        json.dump(figures, f, indent=2)
    print(json.dumps(figures, indent=2))
    draw(figures)


def draw(figures):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    labels = ["create→result p50 (ms)", "round trip p50 (ms)", "idle USS (MiB)"]
    cb = [figures["create_to_first_result_warm_ms"]["cellbox_p50"], figures["round_trip_ms"]["cellbox_p50"],
          figures["idle_kernel_memory_mib"]["cellbox_uss"]]
    jp = [figures["create_to_first_result_warm_ms"]["jupyter_p50"], figures["round_trip_ms"]["jupyter_p50"],
          figures["idle_kernel_memory_mib"]["jupyter_uss"]]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.5))
    for axis, label, a, b in zip(axes, labels, cb, jp):
        axis.bar(["cellbox", "Jupyter Server"], [a, b], color=["teal", "gray"])
        axis.set_title(label)
        axis.set_yscale("log")
        for x, v in enumerate([a, b]):
            axis.text(x, v, f"{v:.1f}", ha="center", va="bottom")
    fig.tight_layout()
    fig.savefig(os.path.join(RESULTS, "latest.png"), dpi=100)


if __name__ == "__main__":
    sys.exit(main())
