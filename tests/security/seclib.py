"""Helpers of the hostile-code suite (tests/security).

Every hostile snippet runs in a cellboxd kernel, never in this process. Before a kernel receives
any hostile code, `prove_sandbox()` checks, from the kernel's own view of itself, that it is in
the sandbox: its own mount, pid and net namespaces (inodes different from this test process's),
seccomp mode 2, a non-root uid, no capabilities, no_new_privs. A kernel that fails the proof
stops the whole run (pytest.exit), so no hostile cell ever reaches an unsandboxed kernel.

- HostState      a snapshot of what the attacks try to change on the host (files, hostname,
                 mounts, time, canary files), compared after every test.
- SandboxKernel  one kernel with its WebSocket: run(code) collects the cell's messages until
                 `idle` or `dead` (a Cell); json(code) returns what the cell put in `_result`.
- Sandboxes      one module's daemon, client, neighbour kernel and host baseline;
                 assert_contained() is the four-part check each test ends with.
"""
import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import tempfile
import time

import pytest

from helpers.client import ExecResult
from helpers.processes import start_time
from helpers.wait import wait_until

RESULT_MARK = "@@CELLBOX-RESULT@@"
PROOF_MARK = "@@CELLBOX-PROOF@@"
WORKSPACE_MOUNT_RE = re.compile(r"/workspaces/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
# A named volume's mount and the sandboxes' id-mapped views of it (sandbox/volume_shared.h).
VOLUME_MOUNT_RE = re.compile(r"/named-volumes/volume-[A-Za-z0-9._-]+$|"
                             r"/volume-views/[0-9a-f]{8}-[0-9a-f-]{27}/[A-Za-z0-9._-]+$")
# A template's read-only view (model/templates.h): overlays or binds of its layers, mounted by
# a daemon that has templates with files, this module's or another test's on this machine.
TEMPLATE_VIEW_RE = re.compile(r"/templates/views/[A-Za-z0-9._-]+/[A-Za-z0-9._/-]+$")
# A build step's writable view (model/templates.h, templates_mount_build_view), which a daemon
# building a template mounts under its data directory's templates/ while the step runs.
TEMPLATE_BUILD_RE = re.compile(r"/data/templates/[a-z]+/[0-9a-f]{16}/[A-Za-z0-9._/-]+$")
# A test's small snapshot store: the full-disk tests of snapshots (tests/integration) mount a
# tmpfs of a few MiB at a test daemon's DATA_DIR/snapshots, another test's on this shared machine.
SNAPSHOT_STORE_RE = re.compile(r"/cellbox-test-cellboxd-[A-Za-z0-9_]+/data/snapshots$")
# A snapshot's workspace image, mounted read-only by a daemon while it copies the snapshot's files
# into a restored sandbox (model/snapshot_restore.c: DATA_DIR/snapshot-mounts/<snapshot id>-<n>).
SNAPSHOT_MOUNT_RE = re.compile(r"/snapshot-mounts/[0-9a-f]{8}-[0-9a-f-]{27}-[0-9]+$")
# A name no host path has; attacks use it for the files they try to create outside.
PWN = "cellbox-pwned-" + secrets.token_hex(4)

# ------------------------------------------------------------------ the proof

PROOF_CODE = f"""
import os as _os, json as _json
def _zygote_clone():
    try:
        # pid 1 is always the small supervisor; a zygote clone keeps the zygote's argv.
        return b'--zygote' in open('/proc/self/cmdline', 'rb').read().split(b'\\0')
    except OSError:
        return None
_st = {{}}
for _line in open('/proc/self/status'):
    _k, _, _v = _line.partition(':')
    _st[_k] = _v.strip()
print({PROOF_MARK!r} + _json.dumps({{
    'mnt': _os.readlink('/proc/self/ns/mnt'), 'pidns': _os.readlink('/proc/self/ns/pid'),
    'net': _os.readlink('/proc/self/ns/net'), 'uid': _os.getuid(), 'euid': _os.geteuid(),
    'gid': _os.getgid(), 'seccomp': _st.get('Seccomp'), 'nnp': _st.get('NoNewPrivs'),
    'capeff': _st.get('CapEff'), 'capprm': _st.get('CapPrm'), 'capbnd': _st.get('CapBnd'),
    'capamb': _st.get('CapAmb'), 'pid': _os.getpid(), 'cwd': _os.getcwd(),
    'zygote_clone': _zygote_clone()}}), flush=True)
del _st, _line, _k, _v
"""


def read_proof(stdout):
    """The identity PROOF_CODE printed, or None when it printed none."""
    lines = [line for line in stdout.splitlines() if line.startswith(PROOF_MARK)]
    return json.loads(lines[-1][len(PROOF_MARK):]) if lines else None


def host_namespaces():
    return {name: os.readlink(f"/proc/self/ns/{name}") for name in ("mnt", "pid", "net")}


def proof_problems(proof, network=False):
    """What is wrong with a kernel's proof (empty when it is sandboxed)."""
    host = host_namespaces()
    problems = []
    if not proof:
        return ["the kernel did not report its identity"]
    if proof["mnt"] == host["mnt"]:
        problems.append(f"same mount namespace as the host ({proof['mnt']})")
    if proof["pidns"] == host["pid"]:
        problems.append(f"same pid namespace as the host ({proof['pidns']})")
    # Networked or not, a sandbox's network namespace is its own (a networked one has an
    # interface there, sandbox/network.c); `network` is kept for callers that pass it.
    if proof["net"] == host["net"]:
        problems.append(f"same network namespace as the host ({proof['net']})")
    if proof["seccomp"] != "2":
        problems.append(f"Seccomp: {proof['seccomp']} (expected 2, a filter)")
    if proof["uid"] == 0 or proof["euid"] == 0 or proof["gid"] == 0:
        problems.append(f"runs as uid {proof['uid']}/euid {proof['euid']}/gid {proof['gid']}")
    for cap in ("capeff", "capprm", "capbnd", "capamb"):
        if proof[cap] is None or int(proof[cap], 16) != 0:
            problems.append(f"{cap} = {proof[cap]} (expected 0)")
    if proof["nnp"] != "1":
        problems.append(f"NoNewPrivs: {proof['nnp']}")
    return problems


# ------------------------------------------------------------------ host state

def sha256(path):
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except FileNotFoundError:
        return None
    return h.hexdigest()


def host_mounts():
    with open("/proc/self/mounts") as f:
        return {tuple(line.split()[:4]) for line in f}


def pids_in_pid_namespace(ns_link):
    """Host pids whose pid namespace is ns_link ('pid:[4026...]')."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry}/ns/pid") == ns_link:
                    found.append(int(entry))
    return found


def processes_of(ns_link):
    """{host pid: start time} of a pid namespace's processes now. A namespace's inode number is
    handed to the next namespace made once it is freed, so "its processes are gone" must be
    checked by pid and start time, not by the namespace's name."""
    return {pid: start_time(pid) for pid in pids_in_pid_namespace(ns_link)}


def all_gone(processes):
    return not any(start_time(pid) == started for pid, started in processes.items())


class HostState:
    """What hostile cells try to change on the host, captured once per module."""

    FILES = ("/etc/passwd", "/etc/shadow", "/etc/group", "/etc/gshadow", "/etc/hosts",
             "/etc/hostname", "/etc/sudoers", "/root/.bashrc", "/root/.profile",
             "/sys/fs/cgroup/memory/release_agent", "/sys/fs/cgroup/pids/release_agent",
             "/proc/sys/kernel/core_pattern", "/proc/sys/kernel/hostname",
             "/proc/sys/kernel/domainname", "/proc/sys/kernel/modprobe")
    # Where an escaped write of PWN would land.
    PWN_DIRS = ("/", "/etc", "/usr", "/usr/bin", "/usr/local/bin", "/tmp", "/var/tmp", "/dev/shm",
                "/root", "/home", "/home/user", "/opt", "/workspace")

    def __init__(self, binaries=()):
        self.outside = tempfile.mkdtemp(prefix="cellbox-security-outside-")
        self.canary_path = os.path.join(self.outside, "canary.txt")
        self.canary = "canary " + secrets.token_hex(16)
        with open(self.canary_path, "w") as f:
            f.write(self.canary)
        self.files = {p: sha256(p) for p in tuple(self.FILES) + tuple(binaries)}
        self.stats = {p: self._stat(p) for p in tuple(binaries) + ("/usr/bin/python3", "/usr/bin/su")}
        self.hostname = socket.gethostname()
        self.mounts = host_mounts()
        self.wall0, self.mono0 = time.time(), time.monotonic()
        self.etc = set(os.listdir("/etc"))

    @staticmethod
    def _stat(path):
        with contextlib.suppress(OSError):
            st = os.stat(path)
            return (st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns)
        return None

    def problems(self):
        out = []
        try:
            with open(self.canary_path) as f:
                if f.read() != self.canary:
                    out.append(f"canary {self.canary_path} changed")
        except OSError as e:
            out.append(f"canary {self.canary_path}: {e}")
        for path, digest in self.files.items():
            now = sha256(path)
            if now != digest:
                out.append(f"host file {path} changed ({digest} -> {now})")
        for path, st in self.stats.items():
            if self._stat(path) != st:
                out.append(f"host file {path} metadata changed")
        if socket.gethostname() != self.hostname:
            out.append(f"host hostname changed: {self.hostname!r} -> {socket.gethostname()!r}")
        added = host_mounts() - self.mounts
        # Named network namespaces (`ip netns add`: nsfs at /run/netns/<name>) are the test
        # hosts network tests make on this shared machine, this run's or another's.
        # A daemon's workspaces are ext4 images, or tmpfs where the daemon was started so
        # (another test's daemon on this shared machine, started while this module runs).
        foreign = [m for m in added
                   if not (m[2] == "ext4" and (WORKSPACE_MOUNT_RE.search(m[1]) or VOLUME_MOUNT_RE.search(m[1])))
                   and not (m[2] == "tmpfs" and (WORKSPACE_MOUNT_RE.search(m[1]) or SNAPSHOT_STORE_RE.search(m[1])))
                   and not (m[2] == "nsfs" and m[1].startswith("/run/netns/"))
                   and not (SNAPSHOT_MOUNT_RE.search(m[1]) and "ro" in m[3].split(","))
                   and not (TEMPLATE_VIEW_RE.search(m[1]) and "ro" in m[3].split(","))
                   and not (m[2] == "overlay" and TEMPLATE_BUILD_RE.search(m[1]))]
        if foreign:
            out.append(f"new host mounts that are not workspace volumes: {sorted(foreign)}")
        drift = (time.time() - self.wall0) - (time.monotonic() - self.mono0)
        if abs(drift) > 5:
            out.append(f"host wall clock moved by {drift:.1f} s against the monotonic clock")
        for d in self.PWN_DIRS:
            with contextlib.suppress(OSError):
                hits = [n for n in os.listdir(d) if PWN in n]
                if hits:
                    out.append(f"attack files on the host: {[os.path.join(d, n) for n in hits]}")
        new_etc = {n for n in set(os.listdir("/etc")) - self.etc if PWN in n or "cellbox" in n}
        if new_etc:
            out.append(f"new files in host /etc: {sorted(new_etc)}")
        return out

    def cleanup(self):
        shutil.rmtree(self.outside, ignore_errors=True)


# ------------------------------------------------------------------ kernels

class Cell(ExecResult):
    """The messages one execute_request produced, up to its `idle` or `dead` status (an
    ExecResult of helpers/client.py), read as the hostile tests read them."""

    def __init__(self, code, result):
        super().__init__(result.request, result.messages)
        self.code = code

    @property
    def errors(self):
        return [m["content"] for m in self.of_type("error")]

    @property
    def error(self):
        return self.errors[0] if self.errors else None

    @property
    def ename(self):
        return self.error["ename"] if self.error else None

    @property
    def reply_content(self):
        """The execute_reply's content; None when none came (a kernel that died says `dead`)."""
        replies = self.of_type("execute_reply")
        return replies[0]["content"] if replies else None

    @property
    def final_state(self):
        return self.statuses[-1] if self.statuses else None

    @property
    def displays(self):
        return [m["content"] for m in self.messages if m["msg_type"] in ("display_data", "execute_result")]

    def result(self):
        lines = [line for line in self.stdout.splitlines() if line.startswith(RESULT_MARK)]
        assert lines, f"the cell reported no result; {self.describe()}"
        return json.loads(lines[-1][len(RESULT_MARK):])

    def describe(self):
        err = self.error
        return (f"types={self.types} state={self.final_state} "
                f"stdout={self.stdout[-1500:]!r} stderr={self.stderr[-1500:]!r} "
                f"error={(err['ename'], err['evalue']) if err else None}")

    def __repr__(self):
        return f"<Cell {self.describe()}>"


class SandboxKernel:
    """A kernel of a module's daemon with one WebSocket open, proven sandboxed before use."""

    def __init__(self, box, model, limits=None, network=False):
        self.box = box
        self.id = model["id"]
        self.limits = limits or {}
        self.network = network
        self.ws = None
        self.proof = None
        self.connect()
        self.prove()

    @property
    def client(self):
        return self.box.client

    @property
    def workspace(self):
        """The workspace's path on the host."""
        return self.box.daemon.workspace(self.id)

    @property
    def uid(self):
        return self.proof["uid"]

    def connect(self):
        if self.ws is not None:
            self.ws.close()
        self.ws = self.client.ready_ws(self.id)

    def prove(self):
        """The kernel process now running must be sandboxed; otherwise stop the whole run."""
        cell = self.run(PROOF_CODE, timeout=60)
        proof = read_proof(cell.stdout)
        problems = proof_problems(proof, self.network)
        if problems:
            pytest.exit("SANDBOX NOT IN EFFECT for kernel %s: %s -- no hostile code was run. %s"
                        % (self.id, "; ".join(problems), cell.describe()), returncode=3)
        self.proof = proof
        mode = self.box.mode
        if mode in ("zygote", "exec"):
            assert proof["zygote_clone"] is (mode == "zygote"), (
                f"kernel {self.id} should have been started by {mode} but its command line says otherwise: {proof}")
        return proof

    def run(self, code, timeout=60):
        """Execute code; collect its messages until `idle` or `dead` (for this request)."""
        request = self.ws.send_execute(code)
        return Cell(code, self.ws.collect(request, timeout=timeout, until_reply=False))

    def ok(self, code, timeout=60):
        """Run code that must succeed; return the Cell."""
        cell = self.run(code, timeout=timeout)
        assert cell.final_state == "idle" and cell.error is None and cell.reply_content and \
            cell.reply_content["status"] == "ok", f"cell failed: {cell.describe()}"
        return cell

    def json(self, code, timeout=60):
        """Run code that sets `_result`; return it (JSON round-trip)."""
        cell = self.ok(code + f"\nimport json as _j\nprint({RESULT_MARK!r} + _j.dumps(_result, default=repr))\n",
                       timeout=timeout)
        return cell.result()

    def model(self):
        return self.client.kernel_model(self.id)

    def restart(self):
        r = self.client.post(f"api/kernels/{self.id}/restart")
        assert r.status_code == 200, f"restart -> {r.status_code} {r.text}"
        self.ws.inbox.clear()
        self.ws.kernel_info(timeout=60)
        self.prove()

    def host_pids(self):
        """{pid inside the sandbox: host pid} for the sandbox's processes (its pid namespace)."""
        out = {}
        for hp in pids_in_pid_namespace(self.proof["pidns"]):
            with contextlib.suppress(OSError, IndexError, ValueError):
                with open(f"/proc/{hp}/status") as f:
                    line = [x for x in f.read().splitlines() if x.startswith("NSpid:")][0]
                out[int(line.split()[-1])] = hp
        return out

    def supervisor_host_pid(self):
        """The sandbox's pid 1 as the host sees it."""
        return self.host_pids().get(1)

    def kernel_host_pid(self):
        """The kernel process (the one that ran the proof) as the host sees it."""
        return self.host_pids().get(self.proof["pid"])

    def delete(self):
        if self.ws is not None:
            self.ws.close()
        return self.client.delete(f"api/kernels/{self.id}")


class Sandboxes:
    """One module's daemon, a client, the neighbour kernel and the host baseline."""

    def __init__(self, daemon, secret, mode="default"):
        self.daemon = daemon
        self.mode = mode  # "zygote" / "exec": how the daemon starts kernels; "default": not chosen
        self.client = daemon.client()
        self.secret = secret  # in the daemon's environment only
        self.kernels = []
        self.host = HostState(binaries=(daemon.binary, os.path.join(os.path.dirname(daemon.binary),
                                                                      "cellbox-kernel")))
        self.neighbour = None
        self.neighbour_value = "neighbour-" + secrets.token_hex(8)

    def start_neighbour(self):
        self.neighbour = self.kernel()
        self.neighbour.ok(f"NEIGHBOUR_STATE = {self.neighbour_value!r}\n"
                          f"open('/workspace/neighbour.txt', 'w').write({self.neighbour_value!r})\n")
        return self.neighbour

    def kernel(self, limits=None, network=False, **body):
        if limits:
            body["limits"] = limits
        if network:
            body["network"] = True
        r = self.client.post("api/kernels", json=body)
        assert r.status_code == 201, f"POST /api/kernels {body} -> {r.status_code} {r.text}"
        k = SandboxKernel(self, r.json(), limits, network)
        self.kernels.append(k)
        return k

    def cleanup(self):
        for k in self.kernels:
            with contextlib.suppress(Exception):
                k.delete()
        self.kernels.clear()
        self.host.cleanup()

    # -------------------------------------------------------------- the four checks
    def assert_contained(self, *, host=True, server=True, neighbour=True):
        problems = []
        if server:
            if not self.daemon.alive():
                problems.append(f"cellboxd exited; log tail:\n{self.daemon.log_tail()}")
            else:
                r = self.client.get("api", timeout=30)
                if r.status_code != 200 or "version" not in r.json():
                    problems.append(f"GET /api -> {r.status_code} {r.text[:200]}")
                # The zygote is the daemon's too: no sandbox may take it down.
                ended = re.search(r"zygote \(pid \d+\) ended \([^)]*\)", self.daemon.log_text())
                if ended:
                    problems.append(f"the zygote died: {ended.group(0)}")
        if host:
            problems += self.host.problems()
        if neighbour and self.neighbour is not None and not problems:
            nb = self.neighbour
            model = nb.model()
            if model["execution_state"] != "idle":
                problems.append(f"the neighbour kernel is {model}")
            else:
                cell = nb.run("print(NEIGHBOUR_STATE, open('/workspace/neighbour.txt').read())", timeout=60)
                if cell.stdout.strip() != f"{self.neighbour_value} {self.neighbour_value}":
                    problems.append(f"the neighbour lost its state: {cell.describe()}")
            with contextlib.suppress(OSError):
                with open(os.path.join(nb.workspace, "neighbour.txt")) as f:
                    if f.read() != self.neighbour_value:
                        problems.append("the neighbour's workspace file changed")
        assert not problems, "containment broken:\n- " + "\n- ".join(problems)


__all__ = ["Cell", "ELF_HEADER", "HostState", "PWN", "REWRITE_LIBPYTHON_HEADER", "SandboxKernel",
           "Sandboxes", "all_gone", "assert_libpython_header_intact", "zygote_bytes",
           "host_namespaces", "pids_in_pid_namespace", "processes_of", "proof_problems", "read_proof", "sha256",
           "start_time", "wait_until"]


# Where libpython's ELF header is in this kernel's memory: the first page of the library, on the
# huge page the zygote shares with every kernel (huge_code.h) when the kernel is a zygote clone
# (test_shared_code.py, test_shared_code_pool.py).
LIBPYTHON_HEADER = """
import ctypes
class _DlInfo(ctypes.Structure):
    _fields_ = [('fname', ctypes.c_char_p), ('fbase', ctypes.c_void_p),
                ('sname', ctypes.c_char_p), ('saddr', ctypes.c_void_p)]
_info = _DlInfo()
assert ctypes.CDLL(None).dladdr(ctypes.cast(ctypes.pythonapi.Py_GetVersion, ctypes.c_void_p),
                                ctypes.byref(_info))
_base = _info.fbase
"""

# The attack of test_shared_code*.py: make the first page of libpython writable and write into its
# header. _result: the header's address, its first bytes before and after, what mprotect returned
# (and errno), and the file the page is mapped from (none for anonymous memory).
REWRITE_LIBPYTHON_HEADER = LIBPYTHON_HEADER + """
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_result = {'base': _base, 'before': ctypes.string_at(_base, 4).hex(),
           'mprotect': _libc.mprotect(_base, 4096, 3)}
_result['errno'] = ctypes.get_errno()
if _result['mprotect'] == 0:
    ctypes.memmove(_base + 1, b'PWN', 3)
_result['after'] = ctypes.string_at(_base, 4).hex()
_result['mapped_from'] = [line.split()[5:] for line in open('/proc/self/maps')
                          if int(line.split('-')[0], 16) <= _base < int(line.split()[0].split('-')[1], 16)]
"""
ELF_HEADER = b"\x7fELF"


def zygote_bytes(box, address, count):
    """`count` bytes of the zygote's memory at `address` (its pid from the daemon's log)."""
    import re
    zygote = int(re.findall(r"zygote ready \(pid (\d+)", box.daemon.log_text())[-1])
    with open(f"/proc/{zygote}/mem", "rb") as mem:
        mem.seek(address)
        return mem.read(count)


def assert_libpython_header_intact(box, kernels, base):
    """Each of `kernels` still reads libpython's ELF header; zygote clones at `base`, the
    address of the page they all share."""
    for kernel in kernels:
        seen = kernel.json(LIBPYTHON_HEADER + "_result = [_base, ctypes.string_at(_base, 4).hex()]")
        assert seen[1] == ELF_HEADER.hex(), seen
        if box.mode == "zygote":
            assert seen[0] == base  # the same address: the same shared page
