"""Hostile code against sandboxes made from a snapshot (issue 24): a RESTORED sandbox (POST
/v1/snapshots/{id}/restore) and a FORKED one (POST /v1/sandboxes/{id}/fork) get the same
escape classes as every sandbox (other sandboxes' files, host files and secrets, the host's
/proc, signals to other pids, new privileges and seccomp'd calls, the network, leaked
descriptors), and each attack fails with the host, the neighbour and the sandbox they were made
from untouched. Then a kernel that prepares a hostile state before the snapshot: descriptors to
paths it should not reach (a file swapped for a link to a host path, a deleted file whose
"(deleted)" name is planted as a link) are not gained by the restore; a kernel with a thread
is refused a process snapshot or carried at the Python level, saying so; links planted in the
workspace to host paths do not make the daemon copy host files into the snapshot or a copy.

Every copy is proven sandboxed (seclib.SandboxKernel.prove) before it runs anything hostile.
"""
import contextlib
import json
import os
import struct

import pytest

from helpers.v1 import V1
from seclib import PWN, SandboxKernel, processes_of

pytestmark = pytest.mark.cellbox_only

EPERM, ENOENT, EACCES, ESRCH = 1, 2, 13, 3

SOURCE_VALUE = "source-" + PWN
SOURCE_STATE = f"""
SOURCE_STATE = {SOURCE_VALUE!r}
open('/workspace/source.txt', 'w').write({SOURCE_VALUE!r})
"""

FD_LISTING = r"""
import os
_result = {}
for name in os.listdir('/proc/self/fd'):
    try:
        _result[name] = os.readlink(f'/proc/self/fd/{name}')
    except OSError:
        pass  # the listing's own descriptor, closed by now
"""


# ------------------------------------------------------------------ making copies

def snapshot(v1, sid):
    r = v1.post(f"v1/sandboxes/{sid}/snapshots", json={}, timeout=180)
    assert r.status_code == 201, f"snapshot {sid} -> {r.status_code} {r.text[:600]}"
    return r.json()


def restore(v1, snapshot_id):
    r = v1.post(f"v1/snapshots/{snapshot_id}/restore", json={}, timeout=180)
    assert r.status_code == 201, f"restore {snapshot_id} -> {r.status_code} {r.text[:600]}"
    v1.created.append(r.json()["id"])
    return r.json()


def fork_one(v1, sid, mode):
    r = v1.post(f"v1/sandboxes/{sid}/fork", json={"count": 1}, timeout=180)
    if mode == "exec" and r.status_code != 201:
        # A fork is a copy of a zygote clone's memory (docs/architecture.md): a daemon that
        # execs its kernels refuses it, saying why, and there is no fork to attack.
        assert r.status_code in (400, 409) and "zygote" in r.json()["message"], r.text[:400]
        pytest.skip(f"a daemon without a zygote forks nothing: {r.json()['message']}")
    assert r.status_code == 201, f"fork {sid} -> {r.status_code} {r.text[:600]}"
    entry = r.json()[0]
    assert "sandbox" in entry, f"the fork failed: {entry}"
    v1.created.append(entry["sandbox"]["id"])
    return entry["sandbox"]


def adopt(box, model):
    """A SandboxKernel (proven sandboxed) for a /v1 sandbox: its id is its default context's."""
    k = SandboxKernel(box, {"id": model["id"]})
    box.kernels.append(k)
    return k


def snapshot_dir(box, snapshot_id):
    return os.path.join(box.daemon.data_dir, "snapshots", snapshot_id)


def files_under(root):
    found = []
    for top, _, names in os.walk(root):
        found += [os.path.join(top, n) for n in names]
    return found


def files_holding(paths, needle):
    """Those of these files (read as they are, links not followed) that contain `needle`."""
    hits = []
    for path in paths:
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            tail = b""
            for block in iter(lambda: f.read(1 << 22), b""):
                if needle in tail + block:
                    hits.append(path)
                    break
                tail = block[-len(needle):]
    return hits


class Lineage:
    """A source sandbox with state, and, made when first asked for, a sandbox restored from a
    snapshot of it and a fork of it (each kind's tests run whether or not the other kind
    can be made)."""

    def __init__(self, box):
        self.box = box
        self.v1 = V1(box.daemon)
        self.source = adopt(box, self.v1.create(timeout_s=0))
        self.source.ok(SOURCE_STATE)
        self.source_fds = self.source.json(FD_LISTING)
        self.snapshot = None
        self.copies = {}

    def copy(self, kind):
        if kind not in self.copies:
            if kind == "restored":
                self.snapshot = snapshot(self.v1, self.source.id)
                self.copies[kind] = adopt(self.box, restore(self.v1, self.snapshot["snapshot_id"]))
            else:
                self.copies[kind] = adopt(self.box, fork_one(self.v1, self.source.id, self.box.mode))
        return self.copies[kind]


@pytest.fixture(scope="module")
def lineage(box):
    line = Lineage(box)
    try:
        yield line
    finally:
        line.v1.cleanup()


@pytest.fixture(params=["restored", "forked"])
def copy(request, lineage):
    return lineage.copy(request.param)


def assert_all_contained(box, lineage):
    """The four checks of the suite, and the sandbox the copies came from is untouched."""
    box.assert_contained()
    src = lineage.source
    cell = src.run("print(SOURCE_STATE, open('/workspace/source.txt').read())", timeout=60)
    assert cell.stdout.strip() == f"{SOURCE_VALUE} {SOURCE_VALUE}", f"the source lost its state: {cell.describe()}"
    with open(os.path.join(src.workspace, "source.txt")) as f:
        assert f.read() == SOURCE_VALUE, "the source's workspace file changed"


# ------------------------------------------------------------------ the copies themselves

def test_copy_is_a_sandbox_of_its_own(box, lineage, copy):
    """Its own namespaces and uid: none shared with the source or the neighbour."""
    for other in (lineage.source, box.neighbour):
        for ns in ("mnt", "pidns", "net"):
            assert copy.proof[ns] != other.proof[ns], f"{ns} shared with {other.id}: {copy.proof[ns]}"
        assert copy.uid != other.uid, f"the copy runs as the uid of {other.id} ({copy.uid})"
    # the state it was made with is there
    assert copy.ok("print(SOURCE_STATE)").stdout.strip() == SOURCE_VALUE
    assert_all_contained(box, lineage)


def test_other_sandboxes_files_out_of_reach(box, lineage, copy):
    src, nb = lineage.source, box.neighbour
    targets = [os.path.join(src.workspace, "source.txt"), src.workspace,
               os.path.join(nb.workspace, "neighbour.txt"),
               f"/proc/{src.kernel_host_pid()}/root/workspace/source.txt",
               f"/proc/{nb.kernel_host_pid()}/root/workspace/neighbour.txt",
               os.path.join(box.daemon.data_dir, "snapshots"),
               os.path.join(box.daemon.data_dir, "snapshot.key"), box.daemon.data_dir]
    got = copy.json(f"""
import os
_result = {{}}
for p in {targets!r}:
    try:
        _result[p] = ['dir', os.listdir(p)] if os.path.isdir(p) else ['read', open(p, 'rb').read(64).hex()]
    except OSError as e:
        _result[p] = ['error', e.errno]
""")
    for p, outcome in got.items():
        assert outcome[0] == "error" and outcome[1] in (ENOENT, EACCES), f"{p}: {outcome}"
    assert_all_contained(box, lineage)


def test_host_files_and_secrets_out_of_reach(box, lineage, copy):
    canary = box.host.canary_path
    got = copy.json(f"""
import os
_result = {{'files': {{}}, 'environ_hits': [], 'cmdline_hits': []}}
for p in ('/etc/shadow', '/etc/gshadow', '/root/.bashrc', {canary!r}, {os.path.dirname(canary)!r}):
    try:
        _result['files'][p] = ['read', len(open(p, 'rb').read())] if not os.path.isdir(p) else ['dir', os.listdir(p)]
    except OSError as e:
        _result['files'][p] = ['error', e.errno]
for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
    for what, key in (('environ', 'environ_hits'), ('cmdline', 'cmdline_hits')):
        try:
            data = open(f'/proc/{{pid}}/{{what}}', 'rb').read()
        except OSError:
            continue
        if {box.secret.encode()!r} in data or {box.daemon.token.encode()!r} in data:
            _result[key].append(pid)
""")
    for p, outcome in got["files"].items():
        assert outcome == ["error", ENOENT], f"{p} is visible in the copy: {outcome}"
    assert got["environ_hits"] == [] and got["cmdline_hits"] == [], got
    assert_all_contained(box, lineage)


def test_host_proc_shows_only_the_copy(box, lineage, copy):
    pids = {"daemon": box.daemon.pid, "source": lineage.source.kernel_host_pid(),
            "neighbour": box.neighbour.kernel_host_pid()}
    assert all(pids.values()), pids
    got = copy.json(f"""
import os
_result = {{'pids': sorted(int(p) for p in os.listdir('/proc') if p.isdigit())}}
for name, pid in {pids!r}.items():
    _result[name] = os.path.exists(f'/proc/{{pid}}/status')
""")
    assert got["pids"] == [1, 2], f"the copy sees processes besides its own: {got['pids']}"
    assert not any(got[name] for name in pids), got
    assert_all_contained(box, lineage)


def test_signals_to_other_pids_fail(box, lineage, copy):
    src = lineage.source
    targets = {"daemon": box.daemon.pid, "source": src.kernel_host_pid(),
               "source_pid1": src.supervisor_host_pid(), "neighbour": box.neighbour.kernel_host_pid()}
    assert all(targets.values()), targets
    got = copy.json(f"""
import os, signal
_result = {{}}
for name, pid in {targets!r}.items():
    for sig in (signal.SIGKILL, signal.SIGSTOP):
        try:
            os.kill(pid, sig); _result[f'{{name}}:{{sig.name}}'] = 'sent'
        except OSError as e:
            _result[f'{{name}}:{{sig.name}}'] = e.errno
""")
    for key, outcome in got.items():
        assert outcome in (ESRCH, EPERM), f"kill {key}: {outcome}"
    for name, pid in targets.items():
        assert os.path.exists(f"/proc/{pid}"), f"{name} ({pid}) is gone"
    assert_all_contained(box, lineage)


REFUSED = [("unshare(CLONE_NEWUSER)", 272, (0x10000000,)), ("unshare(CLONE_NEWNS)", 272, (0x00020000,)),
           ("setns", 308, (0, 0)), ("mount", 165, (0, 0, 0, 0, 0)), ("ptrace(TRACEME)", 101, (0, 0, 0, 0)),
           ("bpf", 321, (5, 0, 0)), ("io_uring_setup", 425, (1, 0)), ("userfaultfd", 323, (0,)),
           ("init_module", 175, (0, 0, 0)), ("keyctl", 250, (0, 0, 0, 0, 0))]


def test_new_privileges_and_seccomped_calls_refused(box, lineage, copy):
    got = copy.json(f"""
import ctypes, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
_result = {{}}
for name, number, args in {REFUSED!r}:
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(number), *[ctypes.c_long(a) for a in args])
    _result[name] = [rc, ctypes.get_errno()]
for name, call in (('setuid', lambda: os.setuid(0)), ('setgid', lambda: os.setgid(0))):
    try:
        call(); _result[name] = 'done'
    except OSError as e:
        _result[name] = e.errno
r = subprocess.run(['su', '-c', 'id -u'], input='', capture_output=True, text=True, timeout=20)
_result['su'] = [r.returncode, r.stdout.strip()]
_result['uid'] = [os.getuid(), os.geteuid()]
""")
    for name, _, _ in REFUSED:
        assert got[name] == [-1, EPERM], f"{name}: {got[name]} (expected EPERM)"
    assert got["setuid"] == EPERM and got["setgid"] == EPERM, got
    assert got["su"][0] != 0 and got["su"][1] != "0", got["su"]
    assert 0 not in got["uid"], got
    assert_all_contained(box, lineage)


def test_no_network_where_there_is_none(box, lineage, copy):
    got = copy.json(f"""
import socket
_result = {{'ifaces': [n for _, n in socket.if_nameindex()]}}
for host, port in (('127.0.0.1', {box.daemon.port}), ('1.1.1.1', 53), ('192.0.2.1', 80)):
    s = socket.socket(); s.settimeout(5)
    try:
        s.connect((host, port)); _result[f'{{host}}:{{port}}'] = 'connected'
    except OSError as e:
        _result[f'{{host}}:{{port}}'] = e.errno
    finally:
        s.close()
""")
    assert got["ifaces"] == ["lo"], got
    assert got[f"127.0.0.1:{box.daemon.port}"] == 111, got  # ECONNREFUSED: its own loopback
    for target in ("1.1.1.1:53", "192.0.2.1:80"):
        assert got[target] in (101, 113), f"{target}: {got[target]}"  # ENETUNREACH / EHOSTUNREACH
    assert_all_contained(box, lineage)


def test_copy_holds_no_descriptor_of_the_image_or_the_daemon(box, lineage, copy):
    """Inside: the same descriptors as the kernel it was made from. From the host: neither the
    copy's kernel nor its pid 1 holds the snapshot, a memfd image or anything of the daemon's
    data directory."""
    fds = copy.json(FD_LISTING)
    assert sorted(fds, key=int) == sorted(lineage.source_fds, key=int), (fds, lineage.source_fds)
    for fd, target in fds.items():
        assert not target.startswith("/memfd:") and "snapshot" not in target, f"fd {fd} -> {target}"
    data_dir = os.path.realpath(box.daemon.data_dir)
    for who, pid in (("kernel", copy.kernel_host_pid()), ("pid 1", copy.supervisor_host_pid())):
        assert pid, copy.host_pids()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                assert not target.startswith(("/memfd:", data_dir + "/snapshots", data_dir + "/snapshot.key")), (
                    f"the copy's {who} holds fd {fd} -> {target}")
    assert_all_contained(box, lineage)


# ------------------------------------------------------------------ hostile state before the snapshot

def test_descriptors_to_unreachable_paths_are_not_gained_by_restore(box, lineage):
    """The kernel holds a file it then swaps for a link to a host path, and a deleted file whose
    "(deleted)" name it plants as a link to host paths: whatever the restore reopens, it reopens
    as the sandbox, and no descriptor of the restored kernel is a host file."""
    v1 = lineage.v1
    canary = box.host.canary_path
    src = adopt(box, v1.create(timeout_s=0))
    src.ok(f"""
import os
open('/workspace/plain.txt', 'w').write('plain-content')
held_plain = open('/workspace/plain.txt'); held_plain.read(3)
open('/workspace/swap.txt', 'w').write('swap-content')
held_swap = open('/workspace/swap.txt')
os.remove('/workspace/swap.txt'); os.symlink('/etc/shadow', '/workspace/swap.txt')
open('/workspace/gone.txt', 'w').write('gone-content')
held_gone = open('/workspace/gone.txt')
os.remove('/workspace/gone.txt'); os.symlink({canary!r}, '/workspace/gone.txt (deleted)')
held_dir = os.open('/workspace', os.O_RDONLY | os.O_DIRECTORY)
HELD = {{'plain': held_plain.fileno(), 'swap': held_swap.fileno(), 'gone': held_gone.fileno(), 'dir': held_dir}}
""")
    held = src.json("_result = HELD")  # the numbers a process-level restore keeps
    restored_model = restore(v1, snapshot(v1, src.id)["snapshot_id"])
    restored = adopt(box, restored_model)
    got = restored.json(f"""
import os
_result = {{}}
# the held objects by name: a restore at the Python level keeps objects, not descriptor numbers
for name, obj in (('plain', globals().get('held_plain')), ('swap', globals().get('held_swap')),
                  ('gone', globals().get('held_gone')), ('dir', None)):
    try:
        fd = obj.fileno() if obj is not None else {held['dir']}
        target = os.readlink(f'/proc/self/fd/{{fd}}')
    except (OSError, ValueError) as e:
        _result[name] = ['closed', repr(e)]
        continue
    try:
        seen = sorted(os.listdir(fd)) if name == 'dir' else os.pread(fd, 4096, 0).decode(errors='replace')
    except OSError as e:
        seen = e.errno
    _result[name] = ['open', target, seen]
for p in ('/etc/shadow', {canary!r}):
    try:
        open(p, 'rb'); _result[p] = 'opened'
    except OSError as e:
        _result[p] = e.errno
""")
    with open(canary) as f:
        canary_text = f.read()
    for name, outcome in got.items():
        assert canary_text not in json.dumps(outcome), f"{name}: the restored kernel read the host canary: {outcome}"
    assert got["/etc/shadow"] == ENOENT and got[canary] == ENOENT, got
    for name in ("swap", "gone"):
        if got[name][0] == "open" and got[name][1].startswith("/workspace/"):
            assert got[name][2] in (f"{name}-content", "") or isinstance(got[name][2], int), (
                f"the {name} file reopened as {got[name]}")
    # from the host: no descriptor of the restored kernel is the host's shadow file or canary
    host_files = {(st.st_dev, st.st_ino) for st in (os.stat("/etc/shadow"), os.stat(canary))}
    pid = restored.kernel_host_pid()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            st = os.stat(f"/proc/{pid}/fd/{fd}")
            assert (st.st_dev, st.st_ino) not in host_files, f"the restored kernel holds a host file as fd {fd}"
    report = json.dumps(restored_model.get("restore"))
    assert canary_text not in report, report
    assert_all_contained(box, lineage)


def test_kernel_with_a_thread_is_refused_or_carried_at_python_level_saying_so(box, lineage):
    v1 = lineage.v1
    src = adopt(box, v1.create(timeout_s=0))
    src.ok("""
import threading
THREAD_STOP = threading.Event()
THREAD = threading.Thread(target=THREAD_STOP.wait, args=(300,), daemon=True)
THREAD.start()
WITH_THREAD = 'kept'
""")
    try:
        r = v1.post(f"v1/sandboxes/{src.id}/snapshots", json={}, timeout=180)
        if r.status_code == 201:
            contexts = r.json()["contexts"]
            assert [c["carried"] for c in contexts] == ["python"], (
                f"a kernel with 2 threads was carried as {contexts}")
            assert "thread" in json.dumps(contexts[0]["report"]).lower(), contexts[0]
            copy = adopt(box, restore(v1, r.json()["snapshot_id"]))
            assert copy.ok("print(WITH_THREAD)").stdout.strip() == "kept"
        else:
            # refused: a conflict with the kernel's state, not a missing or malformed request
            assert r.status_code in (409, 422), f"snapshot with a thread -> {r.status_code} {r.text[:400]}"
            assert "thread" in r.json()["message"].lower(), r.text[:400]
            assert v1.get("v1/snapshots", params={"sandbox_id": src.id}).json() == []
        # the kernel itself goes on, its thread too
        assert src.ok("print(WITH_THREAD, THREAD.is_alive())").stdout.strip() == "kept True"
    finally:
        src.run("THREAD_STOP.set(); THREAD.join(10)")
    assert_all_contained(box, lineage)


def test_links_planted_to_host_paths_copy_no_host_file(box, lineage):
    """Links in the workspace to host files and directories: the snapshot's files hold none of
    the host's bytes, and in a restored and a forked copy the links are still links, leading
    nowhere the sandbox could not go."""
    v1 = lineage.v1
    canary = box.host.canary_path
    outside = os.path.dirname(canary)
    links = {"leak-file": canary, "leak-dir": outside, "leak-etc": "/etc", "leak-root": "/",
             "leak-shadow": "/etc/shadow", "leak-data": box.daemon.data_dir}
    src = adopt(box, v1.create(timeout_s=0))
    src.ok(f"""
import os
for name, target in {links!r}.items():
    os.symlink(target, '/workspace/' + name)
os.makedirs('/workspace/sub', exist_ok=True)
os.symlink({canary!r}, '/workspace/sub/deeper')
""")
    snap = snapshot(v1, src.id)
    with open(canary, "rb") as f:
        canary_bytes = f.read()
    stored = files_under(snapshot_dir(box, snap["snapshot_id"]))
    assert stored, "the snapshot has no files on disk"
    assert files_holding(stored, canary_bytes) == [], "the snapshot holds the host canary's bytes"
    for kind in ("restored", "forked"):
        k = adopt(box, restore(v1, snap["snapshot_id"]) if kind == "restored" else fork_one(v1, src.id, box.mode))
        got = k.json(f"""
import os
_result = {{}}
for name in {sorted(links) + ['sub/deeper']!r}:
    p = '/workspace/' + name
    entry = {{'link': os.path.islink(p), 'target': os.readlink(p) if os.path.islink(p) else None}}
    try:
        entry['read'] = open(p, 'rb').read(256).decode(errors='replace') if not os.path.isdir(p) else sorted(os.listdir(p))[:50]
    except OSError as e:
        entry['read'] = e.errno
    _result[name] = entry
""")
        for name, entry in got.items():
            expected = links.get(name, canary)
            assert entry["link"] is True and entry["target"] == expected, f"{kind}: /workspace/{name} is {entry}"
            assert canary_bytes.decode() not in json.dumps(entry), f"{kind}: /workspace/{name} reads the canary"
        # the copy's workspace on the host: the links are links, no host file copied in
        workspace = k.workspace
        for name in list(links) + ["sub/deeper"]:
            assert os.path.islink(os.path.join(workspace, name)), f"{kind}: {name} is no longer a link on disk"
        regular = [p for p in files_under(workspace) if not os.path.islink(p)]
        assert files_holding(regular, canary_bytes) == [], f"{kind}: host canary copied into the workspace"
    # the source's processes are what they were: nothing of the daemon's went into its sandbox
    assert processes_of(src.proof["pidns"]), "the source sandbox lost its processes"
    assert_all_contained(box, lineage)


def test_forged_checkpoint_frames_act_on_nothing(box, lineage):
    """A kernel writes, unasked, the frames of the checkpoint exchange on its channel (fd 3):
    checkpoint_ready with a report, checkpoint_refused, restored, checkpoint_done. The daemon
    reads no memory for them and keeps nothing of them: it kills the kernel for breaking the
    protocol, saying so, or ignores them; a real snapshot afterwards holds nothing forged."""
    v1 = lineage.v1
    k = adopt(box, v1.create(timeout_s=0))
    marker = "FORGED-" + PWN
    frames = [{"channel": "cellbox", "type": "checkpoint_ready", "report": {"carried": [marker]}},
              {"channel": "cellbox", "type": "checkpoint_refused", "why": marker},
              {"channel": "cellbox", "type": "restored", "report": {"reopened": [marker]}},
              {"channel": "cellbox", "type": "checkpoint_done"}]
    payload = b"".join(struct.pack("<I", len(f)) + f for f in (json.dumps(x).encode() for x in frames))
    cell = k.run(f"import os\nos.write(3, {payload!r})\nprint('sent')\n", timeout=60)
    r = v1.get("v1/snapshots", params={"sandbox_id": k.id})
    assert r.status_code == 200 and r.json() == [], f"snapshots after forged frames: {r.status_code} {r.text[:300]}"
    assert marker not in json.dumps(v1.model(k.id)), v1.model(k.id)
    if cell.final_state == "dead":
        assert "protocol" in cell.error["evalue"], cell.describe()
        k.restart()
    else:
        assert "sent" in cell.stdout, cell.describe()
    made = snapshot(v1, k.id)
    assert marker not in json.dumps(made), made
    assert_all_contained(box, lineage)


def test_shared_memory_of_the_source_is_not_shared_with_its_copies(box, lineage):
    """The source holds an anonymous MAP_SHARED mapping (the one kind of memory a fork(2)
    would share). A snapshot and a fork either refuse it, saying so, or give each copy memory
    of its own: a write in a copy never reaches the source or another copy."""
    v1 = lineage.v1
    src = adopt(box, v1.create(timeout_s=0))
    src.ok("import mmap\nSHARED = mmap.mmap(-1, 1 << 20, flags=mmap.MAP_SHARED)\nSHARED[:6] = b'source'")
    probe = "_result = bytes(SHARED[:6]).decode() if 'SHARED' in globals() else None"
    copies = []
    r = v1.post(f"v1/sandboxes/{src.id}/snapshots", json={}, timeout=180)
    if r.status_code == 201:
        copies.append(adopt(box, restore(v1, r.json()["snapshot_id"])))
    else:
        assert r.status_code in (409, 422) and "shared" in r.json()["message"].lower(), r.text[:400]
    r = v1.post(f"v1/sandboxes/{src.id}/fork", json={"count": 2}, timeout=180)
    if r.status_code == 201:
        copies += [adopt(box, e["sandbox"]) for e in r.json() if "sandbox" in e]
    elif box.mode == "exec":
        assert "zygote" in r.json()["message"], r.text[:400]
    else:  # refused as the kernel's state (409), naming the mapping and what to do
        message = r.json()["message"]
        assert r.status_code == 409 and "shared with other processes" in message, r.text[:400]
        assert "MAP_SHARED" in message and "close" in message, r.text[:400]
    for i, k in enumerate(copies):
        if k.json(probe) is not None:
            k.ok(f"SHARED[:6] = b'copy-{i}'")
    assert src.json(probe) == "source"
    for i, k in enumerate(copies):
        assert k.json(probe) in (f"copy-{i}", None), f"copy {i} sees another's write"
    assert_all_contained(box, lineage)
