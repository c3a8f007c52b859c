#!/usr/bin/python3
"""make soak: hold cellboxd under a steady load for minutes and report what it cost.

N WebSocket clients (default 200) spread over K kernels each run a cell every second; every
`--big-every`th cell of a client prints 256 KiB (output bursts that grow the daemon's buffers).
Beside them, create/delete cycles of fresh kernels run at an even pace, at most `--cycles` of
them. Reported: errors, cell round trips (p50/p99), create+delete times, and the daemon's
descriptors and RSS before, during (the highest sample) and after (all clients gone, every
kernel deleted, `--settle` seconds idle). Figures go to stdout and bench/results/soak-latest.json.

    /usr/bin/python3 bench/soak.py [--minutes 10] [--clients 200] [--kernels 20] [--cycles 1000]

Every loop is bounded by its count and by the run's deadline; the daemon runs on a free
loopback port with its own temp data dir and is stopped by its pid.
"""
import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import uuid

import requests
import websocket

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
RESULTS = os.path.join(REPO, "bench", "results")
REPLY_TIMEOUT_S = 60


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """cellboxd on a free port, temp data dir, random token; stopped by pid."""

    def __init__(self, binary, extra_args):
        self.tmp = tempfile.mkdtemp(prefix="cellbox-soak-")
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(self.tmp, "cellboxd.log")
        argv = [binary, "--ip", "127.0.0.1", "--port", str(self.port), "--token", self.token,
                "--data-dir", os.path.join(self.tmp, "data")] + extra_args
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                         start_new_session=True, cwd=self.tmp)
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"token {self.token}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(requests.RequestException):
                if self.http.get(self.base + "/api", timeout=2).json().get("zygote_ready"):
                    return
            if self.proc.poll() is not None:
                raise RuntimeError("cellboxd exited at start:\n" + self.log_tail())
            time.sleep(0.2)
        raise RuntimeError("cellboxd not ready in 60 s:\n" + self.log_tail())

    def log_tail(self, n=3000):
        with open(self.log_path, errors="replace") as f:
            return f.read()[-n:]

    def sample(self):
        """(RSS in MiB, open descriptors) of the daemon now."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            rss_kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        return rss_kib / 1024, len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for line in open("/proc/self/mountinfo"):
            point = line.split()[4]
            if point.startswith(self.tmp):
                subprocess.run(["umount", "-l", point], stderr=subprocess.DEVNULL)
        shutil.rmtree(self.tmp, ignore_errors=True)


def execute_request(session, code):
    msg_id = uuid.uuid4().hex
    header = {"msg_id": msg_id, "msg_type": "execute_request", "session": session,
              "username": "soak", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "version": "5.3"}
    return msg_id, json.dumps({
        "header": header, "parent_header": {}, "metadata": {}, "channel": "shell",
        "content": {"code": code, "silent": False, "store_history": False,
                    "user_expressions": {}, "allow_stdin": False, "stop_on_error": True},
        "buffers": []})


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.cell_ms, self.cycle_ms = [], []
        self.errors = {}

    def error(self, kind):
        with self.lock:
            self.errors[kind] = self.errors.get(kind, 0) + 1


def run_client(daemon, kernel_id, index, deadline, big_every, stats):
    """One WebSocket client: a cell a second until the deadline."""
    session = uuid.uuid4().hex
    try:
        ws = websocket.create_connection(
            f"ws://127.0.0.1:{daemon.port}/api/kernels/{kernel_id}/channels?session_id={session}",
            header=[f"Authorization: token {daemon.token}"], timeout=REPLY_TIMEOUT_S,
            skip_utf8_validation=True, suppress_origin=True)
    except Exception as e:  # noqa: BLE001 - every failure is counted, by kind
        stats.error(f"connect: {type(e).__name__}")
        return
    n = 0
    next_at = time.monotonic() + (index % 100) / 100  # spread the clients over the second
    try:
        while next_at < deadline:
            time.sleep(max(0.0, next_at - time.monotonic()))
            n += 1
            code = "print('y' * 262144)" if big_every and n % big_every == 0 else f"{index} + {n}"
            msg_id, text = execute_request(session, code)
            started = time.monotonic()
            ws.send(text)
            while True:
                if time.monotonic() - started > REPLY_TIMEOUT_S:
                    raise TimeoutError("no execute_reply")
                message = json.loads(ws.recv())
                if (message.get("msg_type") == "execute_reply"
                        and message.get("parent_header", {}).get("msg_id") == msg_id):
                    break
            with stats.lock:
                stats.cell_ms.append((time.monotonic() - started) * 1000)
            if message["content"].get("status") != "ok":
                stats.error("cell status " + str(message["content"].get("status")))
            next_at += 1.0
    except Exception as e:  # noqa: BLE001
        stats.error(f"cell: {type(e).__name__}")
    finally:
        with contextlib.suppress(Exception):
            ws.close()


def run_cycles(daemon, cycles, deadline, stats):
    """Create and delete fresh kernels at an even pace: at most `cycles` before the deadline."""
    if cycles <= 0:
        return
    pace = max(0.0, (deadline - time.monotonic()) / cycles)
    next_at = time.monotonic()
    for _ in range(cycles):
        if next_at >= deadline:
            break
        time.sleep(max(0.0, next_at - time.monotonic()))
        started = time.monotonic()
        try:
            r = daemon.http.post(daemon.base + "/api/kernels", json={}, timeout=REPLY_TIMEOUT_S)
            if r.status_code != 201:
                stats.error(f"create {r.status_code}")
            else:
                d = daemon.http.delete(f"{daemon.base}/api/kernels/{r.json()['id']}",
                                       timeout=REPLY_TIMEOUT_S)
                if d.status_code != 204:
                    stats.error(f"delete {d.status_code}")
                with stats.lock:
                    stats.cycle_ms.append((time.monotonic() - started) * 1000)
        except requests.RequestException as e:
            stats.error(f"cycle: {type(e).__name__}")
        next_at += pace


def percentile(values, p):
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))], 2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--kernels", type=int, default=20, help="the clients are spread over these")
    parser.add_argument("--cycles", type=int, default=1000, help="most create/delete cycles")
    parser.add_argument("--big-every", type=int, default=20,
                        help="every Nth cell of a client prints 256 KiB (0 = never)")
    parser.add_argument("--settle", type=float, default=20, help="idle seconds before 'after'")
    parser.add_argument("--daemon", default=os.environ.get("CELLBOX_DAEMON")
                        or os.path.join(REPO, "build", "bin", "cellboxd"))
    parser.add_argument("--daemon-args", default="", help="extra cellboxd options, one string")
    parser.add_argument("--output", default=os.path.join(RESULTS, "soak-latest.json"))
    args = parser.parse_args()

    daemon = Daemon(args.daemon, args.daemon_args.split())
    stats = Stats()
    samples = []
    try:
        rss, fds = daemon.sample()
        before = {"rss_mib": round(rss, 1), "fds": fds}
        kernels = [daemon.http.post(daemon.base + "/api/kernels", json={}, timeout=60).json()["id"]
                   for _ in range(args.kernels)]
        started = time.monotonic()
        deadline = started + args.minutes * 60
        threads = [threading.Thread(target=run_client, daemon=True,
                                    args=(daemon, kernels[i % len(kernels)], i, deadline,
                                          args.big_every, stats))
                   for i in range(args.clients)]
        threads.append(threading.Thread(target=run_cycles, daemon=True,
                                        args=(daemon, args.cycles, deadline, stats)))
        for t in threads:
            t.start()
        while time.monotonic() < deadline:
            time.sleep(min(10, max(0.1, deadline - time.monotonic())))
            rss, fds = daemon.sample()
            samples.append({"t_s": round(time.monotonic() - started), "rss_mib": round(rss, 1),
                            "fds": fds})
            print(f"  {samples[-1]['t_s']:5d} s  RSS {rss:7.1f} MiB  fds {fds:5d}  cells "
                  f"{len(stats.cell_ms):7d}  errors {sum(stats.errors.values())}", flush=True)
        for t in threads:
            t.join(timeout=REPLY_TIMEOUT_S + 5)
        for kernel_id in kernels:
            with contextlib.suppress(requests.RequestException):
                daemon.http.delete(f"{daemon.base}/api/kernels/{kernel_id}", timeout=60)
        daemon.http.close()
        settle_end = time.monotonic() + args.settle
        while time.monotonic() < settle_end:
            time.sleep(1)
        rss, fds = daemon.sample()
        after = {"rss_mib": round(rss, 1), "fds": fds}
    finally:
        log_tail = daemon.log_tail()
        daemon.stop()

    result = {
        "minutes": args.minutes, "clients": args.clients, "kernels": args.kernels,
        "cycles_asked": args.cycles, "cycles_done": len(stats.cycle_ms),
        "cells": len(stats.cell_ms), "errors": stats.errors,
        "cell_ms": {"p50": percentile(stats.cell_ms, 50), "p99": percentile(stats.cell_ms, 99),
                    "max": percentile(stats.cell_ms, 100)},
        "cycle_ms": {"p50": percentile(stats.cycle_ms, 50), "p99": percentile(stats.cycle_ms, 99)},
        "daemon": {"before": before,
                   "during_max": {"rss_mib": max((s["rss_mib"] for s in samples), default=None),
                                  "fds": max((s["fds"] for s in samples), default=None)},
                   "after": after, "samples": samples},
        "load_average_at_end": os.getloadavg(),
        "daemon_args": args.daemon_args,
    }
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(result, f, indent=1)
    print(f"\nsoak: {args.minutes} min, {args.clients} clients on {args.kernels} kernels, "
          f"{result['cells']} cells, {result['cycles_done']} create/delete cycles")
    print(f"errors: {stats.errors or 'none'}")
    print(f"cell round trip: p50 {result['cell_ms']['p50']} ms, p99 {result['cell_ms']['p99']} ms; "
          f"create+delete p50 {result['cycle_ms']['p50']} ms, p99 {result['cycle_ms']['p99']} ms")
    d = result["daemon"]
    print(f"daemon RSS MiB: before {d['before']['rss_mib']}, during (max) "
          f"{d['during_max']['rss_mib']}, after {d['after']['rss_mib']}; fds: before "
          f"{d['before']['fds']}, during (max) {d['during_max']['fds']}, after {d['after']['fds']}")
    print(f"written to {args.output}")
    if stats.errors:
        print("--- cellboxd log tail ---\n" + log_tail)
    return 1 if stats.errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
