"""Checkpoint figures for `make bench` (bench.py's "checkpoints", `--only checkpoints`).

On one sandbox whose Python context holds ~100 MiB of DataFrames (and a small workspace file):

- fork: POST /v1/sandboxes/{id}/fork {count} -> the answer (every fork running), then the first
  result of a cell in the fork (the copy serves: its DataFrames summed), for count 1 and 4, with
  the daemon's own breakdown of the first fork's time (its answer's restore.timings_ms: the source
  imaged, the fork's sandbox made, its kernel restored, the whole; the first two overlap), medians;
  and the same for a small kernel (one variable: what a fork costs whatever the data);
- snapshot to disk: POST /v1/sandboxes/{id}/snapshots latency, and MiB/s over the bytes the
  snapshot holds (memory image + namespace + files);
- restore from disk: POST /v1/snapshots/{sid}/restore -> the answer, then the first result in the
  restored sandbox, with the snapshot's files dropped from the page cache first
  (posix_fadvise DONTNEED on each: a cold read, without dropping the machine's whole cache), and
  MiB/s over the snapshot's bytes;
- round trips during a snapshot: another sandbox's execute of a one-line cell, over and over,
  while the ~100 MiB sandbox is snapshotted to disk (worst and median), beside the same round
  trips with no snapshot: how long the daemon's loop stood still for the others (the page copy,
  the workspace copy and the seal run on a worker thread, not on the loop); and the same while
  a snapshot is restored into a new sandbox (its seal checked on a worker thread);
- hibernate: POST .../hibernate latency, the memory the hibernated sandbox then holds (its
  processes' RSS: none should be left) and its bytes on disk, and the resume (the next execute
  -> its result, the restore from disk included).

The peer: E2B publishes ~4 s per GiB to pause (snapshot) a sandbox and ~1 s to resume one
(e2b.dev docs, "Sandbox persistence"); cellbox's figures are printed beside those as ratios.
There is no other peer to run on this machine: Jupyter Server keeps no kernel state across a
restart, and Debian's CRIU 3.17 cannot start on this Linux (`criu check` fails on the vDSO).
"""
import glob
import json
import os
import statistics
import threading
import time

import requests

E2B_PAUSE_S_PER_GIB = 4.0
E2B_RESUME_S = 1.0

SETUP_CELL = """
import numpy as np, pandas as pd
frames = [pd.DataFrame(np.arange(i * 1_310_720, (i + 1) * 1_310_720, dtype=np.float64).reshape(-1, 10))
          for i in range(10)]          # 10 x 10 MiB of float64
open('/workspace/notes.txt', 'w').write('kept\\n' * 1000)
total = sum(float(f.values.sum()) for f in frames)
"""
CHECK_CELL = "print(sum(float(f.values.sum()) for f in frames) == total)"


def median(values):
    return round(statistics.median(values), 1) if values else None


def stdout_of(session, base, sandbox, code):
    text = session.post(f"{base}/v1/sandboxes/{sandbox}/execute", json={"code": code},
                        timeout=300).text
    events = [json.loads(line) for line in text.splitlines() if line.strip()]
    assert events and events[-1]["type"] == "end_of_execution", events
    assert not any(e["type"] == "error" for e in events), events
    return "".join(e.get("text", "") for e in events if e["type"] == "stdout")


def tree_rss_kib(pids):
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def sandbox_pids(session, base, sandbox):
    """The sandbox's model and the host pids in its cgroup (the first hierarchy that has it)."""
    model = session.get(f"{base}/v1/sandboxes/{sandbox}").json()
    pids = set()
    for procs in glob.glob(f"/sys/fs/cgroup/**/kernel-{sandbox}/cgroup.procs", recursive=True)[:1]:
        with open(procs) as f:
            pids |= {int(line) for line in f if line.strip()}
    return model, sorted(pids)


def drop_from_page_cache(folder):
    for path in glob.glob(os.path.join(folder, "**"), recursive=True):
        if os.path.isfile(path):
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def folder_bytes(folder):
    """Bytes the snapshot's files take on disk (sparse images count what they hold)."""
    total = 0
    for path in glob.glob(os.path.join(folder, "**"), recursive=True):
        if os.path.isfile(path):
            total += os.stat(path).st_blocks * 512
    return total


def fork_figures(session, base, source, check_cell, count, samples, made):
    """`samples` forks of `source` into `count` sandboxes each: the answer, the first result in
    the first fork (check_cell prints True there), and the daemon's breakdown of the first fork's
    time (medians)."""
    answered, first_result, stages = [], [], {}
    for _ in range(samples):
        t0 = time.perf_counter()
        reply = session.post(f"{base}/v1/sandboxes/{source}/fork", json={"count": count},
                             timeout=300)
        t1 = time.perf_counter()
        assert reply.status_code == 201, reply.text
        forks = [entry["sandbox"]["id"] for entry in reply.json()]
        assert len(forks) == count, reply.text
        made += forks
        assert stdout_of(session, base, forks[0], check_cell).strip() == "True"
        t2 = time.perf_counter()
        answered.append((t1 - t0) * 1000)
        first_result.append((t2 - t0) * 1000)
        for stage, ms in reply.json()[0]["sandbox"]["restore"].get("timings_ms", {}).items():
            stages.setdefault(stage, []).append(ms)
        for fork in forks:
            session.delete(f"{base}/v1/sandboxes/{fork}", timeout=60)
            made.remove(fork)
    return {"answer_ms": median(answered), "first_result_in_fork_ms": median(first_result),
            "stages_ms": {stage: median(values) for stage, values in stages.items()},
            "samples": samples}


def round_trip_ms(session, base, sandbox):
    t0 = time.perf_counter()
    assert stdout_of(session, base, sandbox, "print(1)").strip() == "1"
    return (time.perf_counter() - t0) * 1000


def round_trips_while(session, base, sandbox, busy, at_most=2000):
    """Round trips on `sandbox` until busy() returns (a thread), at most `at_most` of them."""
    times, stop = [], threading.Event()

    def client():
        while not stop.is_set() and len(times) < at_most:
            times.append(round_trip_ms(session, base, sandbox))

    thread = threading.Thread(target=client)
    thread.start()
    try:
        busy()
    finally:
        stop.set()
        thread.join()
    return times


def round_trips_during_snapshot(session, token, base, source, other, samples):
    """Another sandbox's round trips while `source` is snapshotted, and with no snapshot."""
    own = requests.Session()  # the round-trip client's own connection
    own.headers["Authorization"] = f"token {token}"
    during, quiet = [], []
    for _ in range(max(2, samples // 2)):
        snapshots = []

        def snapshot():
            reply = session.post(f"{base}/v1/sandboxes/{source}/snapshots", json={}, timeout=300)
            assert reply.status_code == 201, reply.text
            snapshots.append(reply.json()["snapshot_id"])

        started = time.perf_counter()
        during += round_trips_while(own, base, other, snapshot)
        seconds = time.perf_counter() - started
        quiet += round_trips_while(own, base, other, lambda: time.sleep(seconds))
        for snapshot_id in snapshots:
            session.delete(f"{base}/v1/snapshots/{snapshot_id}", timeout=60)
    return {"worst_ms": round(max(during), 1), "median_ms": median(during),
            "round_trips": len(during),
            "without_snapshot": {"worst_ms": round(max(quiet), 1), "median_ms": median(quiet),
                                 "round_trips": len(quiet)}}


def round_trips_during_restore(session, token, base, source, other, samples):
    """Another sandbox's round trips while a snapshot of `source` is restored (its seal checked
    on a worker thread), worst and median."""
    own = requests.Session()
    own.headers["Authorization"] = f"token {token}"
    during = []
    for _ in range(max(2, samples // 2)):
        reply = session.post(f"{base}/v1/sandboxes/{source}/snapshots", json={}, timeout=300)
        assert reply.status_code == 201, reply.text
        snapshot_id, restored = reply.json()["snapshot_id"], []

        def restore():
            reply = session.post(f"{base}/v1/snapshots/{snapshot_id}/restore", json={}, timeout=300)
            assert reply.status_code == 201, reply.text
            restored.append(reply.json()["id"])

        during += round_trips_while(own, base, other, restore)
        for sandbox in restored:
            session.delete(f"{base}/v1/sandboxes/{sandbox}", timeout=60)
        session.delete(f"{base}/v1/snapshots/{snapshot_id}", timeout=60)
    return {"worst_ms": round(max(during), 1), "median_ms": median(during),
            "round_trips": len(during)}


def checkpoint_figures(start_cellbox, root, samples):
    figures = {"peer": {"e2b_pause_s_per_gib": E2B_PAUSE_S_PER_GIB, "e2b_resume_s": E2B_RESUME_S,
                        "source": "E2B docs, sandbox persistence (published figures)"}}
    data_dir = os.path.join(root, "cb-checkpoints")
    cellbox = start_cellbox(data_dir, pool_size=0)
    session = requests.Session()
    session.headers["Authorization"] = f"token {cellbox.token}"
    base = cellbox.base
    made = []
    try:
        source = session.post(base + "/v1/sandboxes", json={}, timeout=120).json()["id"]
        made.append(source)
        stdout_of(session, base, source, SETUP_CELL)
        assert stdout_of(session, base, source, CHECK_CELL).strip() == "True"

        small = session.post(base + "/v1/sandboxes", json={}, timeout=120).json()["id"]
        made.append(small)
        stdout_of(session, base, small, "x = 1")
        for name, sandbox, check, counts in (("fork", source, CHECK_CELL, (1, 4)),
                                             ("fork_small_kernel", small, "print(x == 1)", (1,))):
            for count in counts:
                figures[f"{name}_{count}"] = fork_figures(session, base, sandbox, check, count,
                                                          samples, made)

        snap_ms, snap_mib_s, restore_ms, restore_first_ms, restore_mib_s, sizes = [], [], [], [], [], []
        for _ in range(max(2, samples // 2)):
            t0 = time.perf_counter()
            reply = session.post(f"{base}/v1/sandboxes/{source}/snapshots", json={}, timeout=300)
            elapsed = time.perf_counter() - t0
            assert reply.status_code == 201, reply.text
            snapshot = reply.json()
            folder = os.path.join(data_dir, "snapshots", snapshot["snapshot_id"])
            size = folder_bytes(folder)
            sizes.append(size)
            snap_ms.append(elapsed * 1000)
            snap_mib_s.append(size / 2**20 / elapsed)
            drop_from_page_cache(folder)
            t0 = time.perf_counter()
            reply = session.post(f"{base}/v1/snapshots/{snapshot['snapshot_id']}/restore", json={},
                                 timeout=300)
            t1 = time.perf_counter()
            assert reply.status_code == 201, reply.text
            restored = reply.json()["id"]
            made.append(restored)
            assert stdout_of(session, base, restored, CHECK_CELL).strip() == "True"
            t2 = time.perf_counter()
            restore_ms.append((t1 - t0) * 1000)
            restore_first_ms.append((t2 - t0) * 1000)
            restore_mib_s.append(size / 2**20 / (t2 - t0))
            session.delete(f"{base}/v1/sandboxes/{restored}", timeout=60)
            made.remove(restored)
            session.delete(f"{base}/v1/snapshots/{snapshot['snapshot_id']}", timeout=60)
        other = session.post(base + "/v1/sandboxes", json={}, timeout=120).json()["id"]
        made.append(other)
        figures["round_trip_during_snapshot_ms"] = round_trips_during_snapshot(
            session, cellbox.token, base, source, other, samples)
        figures["round_trip_during_restore_ms"] = round_trips_during_restore(
            session, cellbox.token, base, source, other, samples)
        mib = statistics.median(sizes) / 2**20
        figures["snapshot_to_disk"] = {
            "snapshot_mib": round(mib, 1), "latency_ms": median(snap_ms),
            "mib_per_s": median(snap_mib_s),
            "e2b_pause_ms_for_same_size": round(E2B_PAUSE_S_PER_GIB * mib / 1024 * 1000, 1),
            "ratio_vs_e2b": round(E2B_PAUSE_S_PER_GIB * mib / 1024 * 1000 / statistics.median(snap_ms), 2)}
        figures["restore_from_disk_cold_cache"] = {
            "answer_ms": median(restore_ms), "first_result_ms": median(restore_first_ms),
            "mib_per_s": median(restore_mib_s),
            "ratio_vs_e2b_resume": round(E2B_RESUME_S * 1000 / statistics.median(restore_first_ms), 2)}

        _, pids_before = sandbox_pids(session, base, source)
        rss_before = tree_rss_kib(pids_before)
        t0 = time.perf_counter()
        reply = session.post(f"{base}/v1/sandboxes/{source}/hibernate", timeout=300)
        hibernate_ms = (time.perf_counter() - t0) * 1000
        assert reply.status_code == 200 and reply.json()["state"] == "hibernated", reply.text
        model, pids_after = sandbox_pids(session, base, source)
        folder = os.path.join(data_dir, "snapshots", model.get("snapshot_id", ""))
        hibernated_disk = folder_bytes(folder) if model.get("snapshot_id") else None
        if model.get("snapshot_id"):
            drop_from_page_cache(folder)
        t0 = time.perf_counter()
        assert stdout_of(session, base, source, CHECK_CELL).strip() == "True"
        resume_ms = (time.perf_counter() - t0) * 1000
        figures["hibernate"] = {
            "hibernate_ms": round(hibernate_ms, 1),
            "rss_running_mib": round(rss_before / 1024, 1),
            "processes_left_hibernated": len(pids_after),
            "rss_hibernated_mib": round(tree_rss_kib(pids_after) / 1024, 1),
            "disk_mib_hibernated": round(hibernated_disk / 2**20, 1) if hibernated_disk else None,
            "resume_to_first_result_ms": round(resume_ms, 1),
            "ratio_vs_e2b_resume": round(E2B_RESUME_S * 1000 / resume_ms, 2)}
    finally:
        for sandbox in made:
            try:
                session.delete(f"{base}/v1/sandboxes/{sandbox}", timeout=60)
            except requests.RequestException:
                pass
        cellbox.stop()
    return figures
