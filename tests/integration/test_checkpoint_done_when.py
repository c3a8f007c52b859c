"""Issue 24's "Done when", against the /v1 contract (docs/api.md, src/model/snapshots.h).

A Python context holding a DataFrame, a numpy array, a fitted object, a closure, a class
instance, a generator mid-iteration and two open files (opened in /workspace, read partly) is
snapshotted, its daemon killed with SIGKILL and a new daemon started on the same data
directory; the sandbox is restored from the snapshot and every one of them is equal, the
generator and the files continuing where they stopped, the context carried as a "process". A
fork of it diverges independently, and the forks and their source see neither each other's
files nor each other's processes. A tampered snapshot is refused (403) and starts nothing. A
full disk while snapshotting answers 507 and loses nothing of the running sandbox. A
hibernated sandbox holds no process, wakes on its next execute with its variables, and
survives a restart of the daemon.

Every daemon is stopped by pid (tests/helpers/daemon.py); the small filesystem of the full-disk
test is a tmpfs this test mounts and unmounts.
"""
import contextlib
import json
import os
import re
import signal
import subprocess
import threading

import pytest

from helpers.asserts import assert_v1_error
from helpers.daemon import Daemon
from helpers.processes import start_time
from helpers.snippets import release, wait_for_file
from helpers.v1 import V1
from helpers.wait import wait_until

pytestmark = pytest.mark.cellbox_only

# The file the context holds open: 20000 numbered lines, larger than a buffered reader's
# buffer, so that both the OS offset and the reader's own buffer matter.
LINES = [f"line {i:05d} of the held file\n" for i in range(20000)]
CONTENT = "".join(LINES).encode()
RAW_OFFSET = 1000  # what the unbuffered reader has consumed

STATE = f"""
import json, os, numpy as np, pandas as pd
from numpy.polynomial import Polynomial
df = pd.DataFrame({{'a': range(1000), 'b': [f'row{{i}}' for i in range(1000)],
                   'c': np.linspace(0.0, 1.0, 1000)}})
arr = np.arange(250_000, dtype=np.float64).reshape(500, 500) * 1.5
_xs = np.linspace(-3.0, 3.0, 200)
fitted = Polynomial.fit(_xs, 2 * _xs ** 3 - _xs + 0.5, deg=3)
def make_counter(start):
    count = [start]
    def bump(step=1):
        count[0] += step
        return count[0]
    return bump
counter = make_counter(100)
counter(); counter(5)  # 106
class Account:
    def __init__(self, owner, balance):
        self.owner, self.balance = owner, balance
    def deposit(self, amount):
        self.balance += amount
        return self.balance
acct = Account('ann', 10)
acct.deposit(32)  # 42
def squares():
    i = 0
    while True:
        yield i * i
        i += 1
gen = squares()
next(gen); next(gen)  # 0, 1: next is 4
with open('/workspace/held.txt', 'wb') as _f:
    _f.write({CONTENT!r})
text_file = open('/workspace/held.txt')
text_file.readline(); text_file.readline()  # the next line is line 2
raw_file = open('/workspace/held.txt', 'rb', buffering=0)
raw_file.read({RAW_OFFSET})
x = 'source'
"""

# What the state is, read without changing it.
FINGERPRINT = """
import json, hashlib, pandas as pd
print(json.dumps({
    'df': int(pd.util.hash_pandas_object(df, index=True).sum()), 'df_shape': list(df.shape),
    'df_dtypes': [str(t) for t in df.dtypes],
    'arr': hashlib.sha256(arr.tobytes()).hexdigest(), 'arr_shape': list(arr.shape),
    'fitted_coef': [round(float(c), 9) for c in fitted.convert().coef],
    'fitted_at': round(float(fitted(0.7)), 9),
    'account': [type(acct).__name__, acct.owner, acct.balance],
    'closure_cells': [c.cell_contents for c in counter.__closure__ if isinstance(c.cell_contents, list)],
    'text_tell': text_file.tell(), 'raw_tell': raw_file.tell(),
    'x': x}, sort_keys=True))
"""

# What the state does next: the generator, the closure, the instance and both files continue.
CONTINUE = """
import json
print(json.dumps({'gen': [next(gen), next(gen)], 'counter': counter(), 'deposit': acct.deposit(1),
                  'text_line': text_file.readline(), 'raw_read': raw_file.read(40).decode()}))
"""
CONTINUED = {"gen": [4, 9], "counter": 107, "deposit": 43, "text_line": LINES[2],
             "raw_read": CONTENT[RAW_OFFSET:RAW_OFFSET + 40].decode()}

# What the daemon logs when it starts a kernel or restores a sandbox.
STARTED_RE = re.compile(r"kernel \S+ started|taken from the warm pool|restored from snapshot")

THREADS = "print(open('/proc/self/status').read().split('Threads:')[1].split()[0])"


# ------------------------------------------------------------------ helpers

def start_daemon(data_dir=None, args=()):
    """A daemon whose zygote is ready (a kernel asked for earlier would be exec'd, not a
    clone of the zygote, and a process image is a zygote clone's)."""
    d = Daemon(args=args)
    if data_dir:
        d.data_dir = data_dir
    d.start()
    try:
        wait_until(lambda: "zygote ready" in d.log_text() or "zygote is not usable" in d.log_text()
                   or not d.alive(), timeout=120, message="the zygote to be ready")
        assert "zygote ready" in d.log_text(), f"the zygote did not start:\n{d.log_tail()}"
    except BaseException:
        d.finish()
        raise
    return d


def kill_hard(d):
    """SIGKILL the daemon by pid (a crash: nothing of its shutdown runs) and wait for it."""
    d.stopped_by_us = True  # its finish() must not report the death as a crash
    os.kill(d.pid, signal.SIGKILL)
    d.proc.wait(timeout=10)


def finish_all(daemons):
    """Finish the daemons newest first: an older daemon's finish() kills whatever still uses
    its temp dir, and a newer daemon on its data directory does."""
    problems = []
    for d in reversed(daemons):
        with contextlib.suppress(Exception):
            p = d.finish()
            if p:
                problems.append(p)
    return problems


def printed(v1, sid, code):
    """The JSON the cell printed last (asserting the cell raised nothing)."""
    ev = v1.execute(sid, code)
    assert not ev.errors, f"cell failed in {sid}: {ev.errors}"
    return json.loads(ev.stdout.strip().splitlines()[-1])


def threads_of(v1, sid):
    return int(v1.execute(sid, THREADS).stdout.strip())


def snapshot(v1, sid, **body):
    r = v1.post(f"v1/sandboxes/{sid}/snapshots", json=body, timeout=180)
    assert r.status_code == 201, (f"POST /v1/sandboxes/{sid}/snapshots -> {r.status_code} {r.text[:600]} "
                                  f"(kernel threads: {threads_of(v1, sid)})")
    return r.json()


def restore(v1, snapshot_id, **body):
    r = v1.post(f"v1/snapshots/{snapshot_id}/restore", json=body, timeout=180)
    assert r.status_code == 201, f"restore {snapshot_id} -> {r.status_code} {r.text[:600]}"
    model = r.json()
    v1.created.append(model["id"])
    return model


def fork(v1, sid, count):
    r = v1.post(f"v1/sandboxes/{sid}/fork", json={"count": count}, timeout=180)
    assert r.status_code == 201, f"fork {sid} x{count} -> {r.status_code} {r.text[:600]}"
    entries = r.json()
    assert isinstance(entries, list) and len(entries) == count, entries
    for entry in entries:
        assert "sandbox" in entry, f"a fork failed: {entry}"
        v1.created.append(entry["sandbox"]["id"])
    return [entry["sandbox"] for entry in entries]


def sandbox_ids(v1):
    return sorted(m["id"] for m in v1.sandboxes())


def kernel_ids(v1):
    r = v1.client.get("api/kernels")
    assert r.status_code == 200, r.text[:300]
    return sorted(k["id"] for k in r.json())


def pid_namespace(v1, sid):
    return v1.execute(sid, "import os; print(os.readlink('/proc/self/ns/pid'))").stdout.strip()


def processes_in_namespace(ns_link):
    """{host pid: start time} of every process whose pid namespace is ns_link."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry}/ns/pid") == ns_link:
                    found[int(entry)] = start_time(int(entry))
    return found


def cgroups_of(pids, sid):
    """The sandbox's own cgroup directories (v2 and every v1 hierarchy; named for its id) these
    processes are in."""
    groups = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            with open(f"/proc/{pid}/cgroup") as f:
                for line in f:
                    _, controllers, path = line.rstrip("\n").split(":", 2)
                    if controllers == "":
                        groups.add(os.path.join("/sys/fs/cgroup", path.lstrip("/")))
                    else:
                        for c in controllers.split(","):
                            c = c.replace("name=", "")
                            groups.add(os.path.join("/sys/fs/cgroup", c, path.lstrip("/")))
    return {g for g in groups if os.path.isdir(g) and sid in g}


def cgroups_named_for(sid, top="/sys/fs/cgroup", depth=8):
    """Every cgroup directory, in any hierarchy, whose name holds the sandbox's id."""
    found = []
    base = top.count("/")
    for root, dirs, _ in os.walk(top):
        if root.count("/") - base >= depth:
            dirs[:] = []
            continue
        found += [os.path.join(root, n) for n in dirs if sid in n]
    return found


def processes_left(groups):
    """Pids still in these cgroups (a removed cgroup holds none)."""
    left = []
    for g in groups:
        with contextlib.suppress(OSError):
            with open(os.path.join(g, "cgroup.procs")) as f:
                left += [int(p) for p in f.read().split()]
    return left


def all_gone(processes):
    return not any(start_time(pid) == started for pid, started in processes.items())


def snapshot_files(data_dir, snapshot_id):
    root = os.path.join(data_dir, "snapshots", snapshot_id)
    found = []
    for top, _, names in os.walk(root):
        found += [os.path.join(top, n) for n in names]
    return sorted(found)


def flip_byte(path):
    """Flip one bit of the byte in the middle of the file (an empty file gets a byte); returns
    what puts the file back."""
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        if size == 0:
            f.write(b"\0")
            return lambda: os.truncate(path, 0)
        offset = size // 2
        f.seek(offset)
        old = f.read(1)
        f.seek(offset)
        f.write(bytes([old[0] ^ 0x01]))

    def put_back():
        with open(path, "r+b") as g:
            g.seek(offset)
            g.write(old)
    return put_back


# ------------------------------------------------------------------ checkpoint, kill, restore

class Chain:
    """The module's story: a context's state snapshotted, its daemon killed, a new daemon on
    the same data directory, the sandbox restored there."""


@pytest.fixture(scope="module")
def chain():
    c = Chain()
    daemons = []
    try:
        # no warm pool: a pool refilling by itself would start kernels while the tampered
        # snapshot's test checks that a refused restore starts none
        first = start_daemon(args=["--pool-size=0"])
        daemons.append(first)
        v1 = V1(first)
        source = v1.create(timeout_s=0)
        c.source_id = source["id"]
        ev = v1.execute(c.source_id, STATE, timeout=120)
        assert not ev.errors, ev.errors
        c.source_threads = threads_of(v1, c.source_id)
        c.before = printed(v1, c.source_id, FINGERPRINT)
        c.snapshot = snapshot(v1, c.source_id, name="done-when", metadata={"case": "done-when"})
        c.listed_before_kill = v1.get("v1/snapshots", params={"sandbox_id": c.source_id}).json()
        c.source_after_snapshot = printed(v1, c.source_id, FINGERPRINT)
        kill_hard(first)

        second = start_daemon(data_dir=first.data_dir, args=["--pool-size=0"])
        daemons.append(second)
        c.daemon, c.data_dir = second, second.data_dir
        c.v1 = V1(second)
        c.snapshot_after_restart = c.v1.get(f"v1/snapshots/{c.snapshot['snapshot_id']}")
        c.restored = restore(c.v1, c.snapshot["snapshot_id"])
        c.restored_id = c.restored["id"]
        yield c
    finally:
        if hasattr(c, "v1"):
            c.v1.cleanup()
        problems = finish_all(daemons)
        if problems:
            pytest.fail("\n\n".join(problems), pytrace=False)


def test_snapshot_model_names_the_sandbox_and_a_process_context(chain):
    s = chain.snapshot
    assert s["sandbox_id"] == chain.source_id and s["name"] == "done-when", s
    assert s["metadata"] == {"case": "done-when"}, s
    assert {"snapshot_id", "created_at", "template", "bytes", "contexts"} <= set(s), s
    assert [ctx["carried"] for ctx in s["contexts"]] == ["process"], (
        f"the context was not carried as a process (kernel threads: {chain.source_threads}): {s['contexts']}")
    assert [x["snapshot_id"] for x in chain.listed_before_kill] == [s["snapshot_id"]]


def test_the_source_goes_on_unchanged_after_its_snapshot(chain):
    assert chain.source_after_snapshot == chain.before


def test_snapshot_survives_the_daemon_being_killed(chain):
    r = chain.snapshot_after_restart
    assert r.status_code == 200, f"GET the snapshot after the restart -> {r.status_code} {r.text[:300]}"
    assert r.json()["snapshot_id"] == chain.snapshot["snapshot_id"]
    listed = chain.v1.get("v1/snapshots").json()
    assert chain.snapshot["snapshot_id"] in [x["snapshot_id"] for x in listed]


def test_restore_report_says_process_for_the_context(chain):
    r = chain.restored
    assert r["id"] != chain.source_id, "a restore without sandbox_id makes a new sandbox"
    assert r["state"] == "running", r
    contexts = r["restore"]["contexts"]
    assert len(contexts) == 1 and contexts[0]["carried"] == "process", json.dumps(r["restore"])


def test_every_object_is_equal_after_restore(chain):
    after = printed(chain.v1, chain.restored_id, FINGERPRINT)
    assert after == chain.before


def test_generator_closure_instance_and_files_continue_where_they_stopped(chain):
    # the restored sandbox has the workspace file the context held, byte for byte
    assert chain.v1.read(chain.restored_id, "/workspace/held.txt") == CONTENT
    assert printed(chain.v1, chain.restored_id, CONTINUE) == CONTINUED
    # and a new cell runs there as anywhere
    assert chain.v1.value(chain.restored_id, "40 + 2") == "42"


# ------------------------------------------------------------------ fork

@pytest.fixture(scope="module")
def forks(chain):
    v1, rid = chain.v1, chain.restored_id
    printed(v1, rid, "import json; x = 'before-fork'; print(json.dumps(x))")
    a, b = fork(v1, rid, 2)
    return rid, a["id"], b["id"]


def test_fork_diverges_independently(chain, forks):
    v1 = chain.v1
    rid, a, b = forks
    assert len({rid, a, b}) == 3
    for sid in (rid, a, b):
        assert printed(v1, sid, "import json; print(json.dumps(x))") == "before-fork"
    printed(v1, a, "import json; x = 'changed in a'; print(json.dumps(x))")
    assert printed(v1, a, "import json; print(json.dumps(x))") == "changed in a"
    assert printed(v1, b, "import json; print(json.dumps(x))") == "before-fork"
    assert printed(v1, rid, "import json; print(json.dumps(x))") == "before-fork"
    # each copy's generator goes on by itself from the same point
    heads = {sid: printed(v1, sid, "import json; print(json.dumps(next(gen)))") for sid in (a, b)}
    assert heads[a] == heads[b], heads
    assert printed(v1, a, "import json; print(json.dumps(next(gen)))") == heads[a] + 2 * int(heads[a] ** 0.5) + 1


def test_forks_and_source_see_none_of_each_others_files(chain, forks):
    v1 = chain.v1
    rid, a, b = forks
    for owner in (rid, a, b):
        name = f"/workspace/only-in-{owner}.txt"
        v1.write(owner, name, f"written in {owner}")
        for other in (rid, a, b):
            seen = printed(v1, other, f"import json, os; print(json.dumps(os.path.exists({name!r})))")
            assert seen is (other == owner), f"{name} written in {owner}, seen in {other}: {seen}"
            r = v1.get(v1.files_url(other), params={"path": name})
            assert r.status_code == (200 if other == owner else 404), (other, r.status_code, r.text[:200])


def test_forks_and_source_see_none_of_each_others_processes(chain, forks):
    v1 = chain.v1
    rid, a, b = forks
    namespaces = {sid: pid_namespace(v1, sid) for sid in (rid, a, b)}
    assert len(set(namespaces.values())) == 3, namespaces
    markers = {}
    for sid in (rid, a, b):
        markers[sid] = f"cellbox-fork-marker-{sid}"
        v1.execute(sid, "import subprocess, sys\n"
                        f"_marked = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', {markers[sid]!r}])")
    listing = ("import json, os\nseen = []\n"
               "for p in os.listdir('/proc'):\n"
               "    if p.isdigit():\n"
               "        try:\n"
               "            seen.append(open(f'/proc/{p}/cmdline', 'rb').read().decode(errors='replace'))\n"
               "        except OSError:\n"
               "            pass\n"
               "print(json.dumps(seen))")
    try:
        for sid in (rid, a, b):
            cmdlines = "\n".join(printed(v1, sid, listing))
            for owner, marker in markers.items():
                assert (marker in cmdlines) is (owner == sid), (
                    f"in {sid}: the process marked by {owner} is {'missing' if owner == sid else 'visible'}")
    finally:
        for sid in (rid, a, b):
            v1.execute(sid, "_marked.kill(); _marked.wait()", expect_status=None)


def test_post_sandboxes_with_a_snapshot_id_restores_it_too(chain):
    v1, sid = chain.v1, chain.snapshot["snapshot_id"]
    r = v1.post("v1/sandboxes", json={"snapshot_id": sid, "timeout_s": 0}, timeout=180)
    assert r.status_code == 201, f"POST /v1/sandboxes from the snapshot -> {r.status_code} {r.text[:600]}"
    made = r.json()
    v1.created.append(made["id"])
    assert made["id"] not in (chain.source_id, chain.restored_id)
    assert [c["carried"] for c in made["restore"]["contexts"]] == ["process"], made["restore"]
    assert printed(v1, made["id"], FINGERPRINT) == chain.before
    v1.remove(made["id"])


# ------------------------------------------------------------------ a tampered snapshot

def test_tampered_snapshot_is_refused_and_starts_nothing(chain):
    v1, sid = chain.v1, chain.snapshot["snapshot_id"]
    files = snapshot_files(chain.data_dir, sid)
    assert any(os.path.basename(p) == "seal" for p in files), files
    assert any(os.path.basename(p) == "snapshot.json" for p in files), files
    sandboxes, kernels = sandbox_ids(v1), kernel_ids(v1)
    for path in files:
        log_before = len(chain.daemon.log_text())
        put_back = flip_byte(path)
        try:
            r = v1.post(f"v1/snapshots/{sid}/restore", json={}, timeout=180)
            if r.status_code == 201:
                v1.created.append(r.json()["id"])
            assert r.status_code == 403, f"{os.path.relpath(path, chain.data_dir)} changed: restore -> {r.status_code} {r.text[:300]}"
            assert "seal" in r.json()["message"], r.text[:300]
            assert sandbox_ids(v1) == sandboxes and kernel_ids(v1) == kernels
            started = STARTED_RE.findall(chain.daemon.log_text()[log_before:])
            assert not started, f"a refused restore started something: {started}"
        finally:
            put_back()
    # every byte put back, the same snapshot restores again: the refusals were the changed
    # bytes' (a copy of the data directory that allocates a hole differently is not a change)
    again = restore(v1, sid)
    assert printed(v1, again["id"], FINGERPRINT) == chain.before
    v1.remove(again["id"])


# ------------------------------------------------------------------ a full disk

@pytest.fixture
def small_snapshot_store():
    """A daemon whose DATA_DIR/snapshots is a 4 MiB tmpfs, filled to the last byte."""
    d = Daemon()
    store = os.path.join(d.data_dir, "snapshots")
    os.makedirs(store)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "cellbox-test-full", store], check=True)
    try:
        with contextlib.suppress(OSError):
            with open(os.path.join(store, "filler"), "wb") as f:
                for _ in range(64):  # 64 x 1 MiB: more than the 4 MiB there is
                    f.write(b"\xa5" * (1 << 20))
                    f.flush()
        d.start()
        wait_until(lambda: "zygote ready" in d.log_text() or not d.alive(), timeout=120,
                   message="the zygote to be ready")
        yield d, store
    finally:
        v1 = V1(d)
        with contextlib.suppress(Exception):
            for m in v1.sandboxes():
                v1.client.delete(f"v1/sandboxes/{m['id']}", timeout=30)
        # the tmpfs is this test's, not a mount the daemon left: off before finish() looks
        d.stop()
        subprocess.run(["umount", store], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        problem = d.finish() if d.proc else None
        if problem:
            pytest.fail(problem, pytrace=False)


def test_full_disk_while_snapshotting_answers_507_and_loses_nothing(small_snapshot_store):
    d, store = small_snapshot_store
    v1 = V1(d)
    sid = v1.create(timeout_s=0)["id"]
    ev = v1.execute(sid, STATE, timeout=120)
    assert not ev.errors, ev.errors
    before = printed(v1, sid, FINGERPRINT)
    r = v1.post(f"v1/sandboxes/{sid}/snapshots", json={"name": "no-room"}, timeout=180)
    assert r.status_code == 507, f"snapshot on a full disk -> {r.status_code} {r.text[:400]}"
    assert "no space" in r.text.lower(), r.text[:400]
    # nothing half-written kept, nothing listed
    assert sorted(os.listdir(store)) == ["filler"], os.listdir(store)
    assert v1.get("v1/snapshots").json() == []
    assert v1.get("v1/snapshots", params={"sandbox_id": sid}).json() == []
    # the sandbox is as it was: running, its variables there, a cell runs
    assert v1.model(sid)["state"] == "running"
    assert printed(v1, sid, FINGERPRINT) == before
    assert printed(v1, sid, CONTINUE) == CONTINUED
    assert v1.value(sid, "6 * 7") == "42"
    assert v1.read(sid, "/workspace/held.txt") == CONTENT


# ------------------------------------------------------------------ hibernation

@pytest.fixture(scope="module")
def hibernation_daemons():
    daemons = []
    yield daemons
    problems = finish_all(daemons)
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


def hibernate(v1, sid):
    r = v1.post(f"v1/sandboxes/{sid}/hibernate", timeout=180)
    assert r.status_code == 200, f"hibernate {sid} -> {r.status_code} {r.text[:600]}"
    assert r.json()["state"] == "hibernated", r.json()
    return r.json()


def test_hibernated_sandbox_holds_no_process_and_wakes_on_execute(hibernation_daemons):
    d = start_daemon()
    hibernation_daemons.append(d)
    v1 = V1(d)
    sid = v1.create(timeout_s=0)["id"]
    ev = v1.execute(sid, STATE, timeout=120)
    assert not ev.errors, ev.errors
    before = printed(v1, sid, FINGERPRINT)
    processes = processes_in_namespace(pid_namespace(v1, sid))
    assert processes, "the sandbox's processes cannot be found on the host"
    groups = cgroups_of(processes, sid)
    assert groups, "the sandbox's cgroups cannot be found"

    hibernate(v1, sid)
    model = v1.model(sid)
    assert model["state"] == "hibernated" and model.get("snapshot_id"), model
    # answered once they are gone: none is left the moment the answer is read
    assert all_gone(processes), "a process of the hibernated sandbox outlived the answer"
    assert processes_left(groups) == [], f"processes left in {sorted(groups)}"
    # the snapshot a hibernated sandbox needs cannot be deleted
    r = v1.delete(f"v1/snapshots/{model['snapshot_id']}")
    assert r.status_code == 409, f"DELETE the hibernated sandbox's snapshot -> {r.status_code} {r.text[:300]}"

    # an execute wakes it, with its variables; the generator and files go on
    assert printed(v1, sid, FINGERPRINT) == before
    assert printed(v1, sid, CONTINUE) == CONTINUED
    assert v1.model(sid)["state"] == "running"
    v1.cleanup()


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
def test_hibernated_sandbox_survives_a_daemon_restart(hibernation_daemons, stop):
    first = start_daemon()
    hibernation_daemons.append(first)
    v1 = V1(first)
    sid = v1.create(timeout_s=0, metadata={"keep": "me"})["id"]
    ev = v1.execute(sid, STATE, timeout=120)
    assert not ev.errors, ev.errors
    before = printed(v1, sid, FINGERPRINT)
    snapshot_id = hibernate(v1, sid).get("snapshot_id") or v1.model(sid)["snapshot_id"]
    if stop == "SIGKILL":
        kill_hard(first)
    else:
        assert first.stop() == 0, first.log_tail()

    second = start_daemon(data_dir=first.data_dir)
    hibernation_daemons.append(second)
    v1 = V1(second)
    model = v1.model(sid)
    assert model["state"] == "hibernated" and model["snapshot_id"] == snapshot_id, model
    assert model["metadata"] == {"keep": "me"}, model
    assert sid in [m["id"] for m in v1.sandboxes()]
    # still asleep once the new daemon has done other work: nothing woke it but a request
    other = v1.create(timeout_s=0)["id"]
    assert v1.value(other, "6 * 7") == "42"
    v1.remove(other)
    assert v1.model(sid)["state"] == "hibernated", v1.model(sid)
    assert processes_left(cgroups_named_for(sid)) == [], "the hibernated sandbox has processes again"
    assert printed(v1, sid, FINGERPRINT) == before
    assert printed(v1, sid, CONTINUE) == CONTINUED
    assert v1.model(sid)["state"] == "running"
    v1.remove(sid)


def test_snapshot_of_a_busy_or_paused_sandbox_is_409_saying_what_to_do(hibernation_daemons):
    d = start_daemon()
    hibernation_daemons.append(d)
    v1 = V1(d)
    sid = v1.create(timeout_s=0)["id"]
    v1.execute(sid, "kept = 42")
    done = {}
    cell = threading.Thread(target=lambda: done.update(
        ev=V1(d).execute(sid, wait_for_file("go-busy", limit=90), timeout=120)))
    cell.start()
    try:
        wait_until(lambda: v1.model(sid)["contexts"][0]["state"] == "busy", timeout=30,
                   message="the cell to run")
        assert_v1_error(v1.post(f"v1/sandboxes/{sid}/snapshots", json={}, timeout=60), 409)
    finally:
        release(d, sid, "go-busy")
        cell.join(120)
    assert "go seen" in done["ev"].stdout, done

    assert v1.post(f"v1/sandboxes/{sid}/pause").status_code == 200
    assert_v1_error(v1.post(f"v1/sandboxes/{sid}/snapshots", json={}, timeout=60), 409, "resume")
    assert v1.post(f"v1/sandboxes/{sid}/resume").status_code == 200
    # the refusals kept nothing; idle and running, the same sandbox snapshots
    assert v1.get("v1/snapshots", params={"sandbox_id": sid}).json() == []
    made = snapshot(v1, sid)
    assert [x["snapshot_id"] for x in v1.get("v1/snapshots", params={"sandbox_id": sid}).json()] == [made["snapshot_id"]]
    assert v1.value(sid, "kept") == "42"
    r = v1.delete(f"v1/snapshots/{made['snapshot_id']}")
    assert r.status_code == 204, f"DELETE the snapshot -> {r.status_code} {r.text[:300]}"
    assert v1.get(f"v1/snapshots/{made['snapshot_id']}").status_code == 404
    assert not os.path.exists(os.path.join(d.data_dir, "snapshots", made["snapshot_id"]))
    v1.remove(sid)


def test_a_context_carried_at_the_python_level_leaves_the_workspace_files_as_they_were():
    """Where the process cannot be imaged (a daemon without a zygote execs its kernels), the
    context is carried at the Python level; files it wrote, with a writer still open or
    already closed, are in the restored sandbox as they were, not reopened for writing."""
    d = Daemon(args=["--zygote=false", "--pool-size=0"]).start()
    try:
        v1 = V1(d)
        sid = v1.create(timeout_s=0)["id"]
        ev = v1.execute(sid, "with open('/workspace/closed.txt', 'w') as closed_writer:\n"
                             "    closed_writer.write('written and closed')\n"
                             "open_writer = open('/workspace/open.txt', 'w')\n"
                             "open_writer.write('written, still open'); open_writer.flush()\n"
                             "kept = 'kept'")
        assert not ev.errors, ev.errors
        made = snapshot(v1, sid)
        assert [c["carried"] for c in made["contexts"]] == ["python"], made["contexts"]
        restored = restore(v1, made["snapshot_id"])
        assert restored["restore"]["contexts"][0]["carried"] == "python", restored["restore"]
        assert v1.value(restored["id"], "kept") == "'kept'"
        for which, sandbox in (("restored", restored["id"]), ("source", sid)):
            for path, content in (("/workspace/closed.txt", b"written and closed"),
                                  ("/workspace/open.txt", b"written, still open")):
                got = v1.read(sandbox, path)
                assert got == content, f"{path} in the {which} sandbox is {got!r}"
        v1.cleanup()
    finally:
        problem = d.finish()
    assert problem is None, problem
