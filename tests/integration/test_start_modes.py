"""The ways cellboxd can start a kernel (docs/api.md: --zygote, --pool-size, --workspace-fs)
must all give the same kernel: state, rich output, host-visible workspace, interrupt, restart,
death reporting."""
import ast
import os

import pytest

from helpers import hugetlb
from helpers.wait import wait_until

pytestmark = pytest.mark.cellbox_only

MODES = {
    "exec-each": ["--zygote=false"],
    "zygote-no-pool": ["--pool-size", "0"],
    "zygote-pool": ["--pool-size", "2"],
    "tmpfs-workspace": ["--workspace-fs", "tmpfs"],
}


PROFILE_TREE = """import os, stat
shell = get_ipython()
root, profile = os.environ["IPYTHONDIR"], shell.profile_dir
([(os.path.relpath(os.path.join(parent, name), root), oct(stat.S_IMODE(os.lstat(os.path.join(parent, name)).st_mode)))
  for parent, dirs, files in sorted(os.walk(root)) for name in sorted(dirs + files)],
 shell.ipython_dir == root, [os.path.relpath(getattr(profile, name), root) for name in
 ("location", "security_dir", "log_dir", "startup_dir", "pid_dir", "static_dir")])"""
EXPECTED_PROFILE_TREE = (
    [("profile_default", "0o755"), ("profile_default/db", "0o755"), ("profile_default/log", "0o755"),
     ("profile_default/pid", "0o700"), ("profile_default/security", "0o700"),
     ("profile_default/startup", "0o755"), ("profile_default/startup/README", "0o644")],
    True,
    ["profile_default", "profile_default/security", "profile_default/log", "profile_default/startup",
     "profile_default/pid", "profile_default/static"])


@pytest.mark.parametrize("mode", sorted(MODES))
def test_kernel_behaves_the_same(make_daemon, mode):
    d = make_daemon(args=MODES[mode])
    c = d.client()
    for round_ in range(2):  # the second kernel may come from a pool the first one started
        k = c.create_kernel()
        kid = k["id"]
        with c.ready_ws(kid) as ws:
            ws.execute("v = 20")
            assert ws.execute("v + 22").result_data()["text/plain"] == "42"
            # User code sees every CPU the daemon may use, whichever way its kernel started.
            cpus = ws.execute("import os\nsorted(os.sched_getaffinity(0))").result_data()["text/plain"]
            assert cpus == str(sorted(os.sched_getaffinity(0)))
            # IPython's profile directory: made by IPython's own code in an exec'd kernel, made
            # directly by a zygote kernel (shell.py): the same tree, modes and traits.
            tree = ws.execute(PROFILE_TREE).result_data()["text/plain"]
            assert ast.literal_eval(tree) == EXPECTED_PROFILE_TREE
            # IPython's pickleshare database (%store, %bookmark), which a zygote kernel opens on
            # first use: there, in the profile's db directory, and it keeps what it is given.
            db = ws.execute("import os\ndb = get_ipython().db\ndb['mode'] = 42\n"
                            "(type(db).__name__, db['mode'], sorted(os.listdir(db.root)),"
                            " str(db.root) == os.path.join(get_ipython().profile_dir.location, 'db'))")
            assert ast.literal_eval(db.result_data()["text/plain"]) == ("PickleShareDB", 42, ["mode"], True)
            # %logstart: the shell's logger (the zygote's, adopted) starts inactive and logs
            # into the working directory.
            assert ws.execute("get_ipython().logger.log_active").result_data()["text/plain"] == "False"
            ws.execute("%logstart -q mode_log.py")
            ws.execute("mode_logged = 7")
            ws.execute("%logstop")
            logged = ws.execute("'mode_logged = 7' in open('mode_log.py').read()")
            assert logged.result_data()["text/plain"] == "True"
            r = ws.execute("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()", timeout=90)
            assert [sorted(m["content"]["data"]) for m in r.of_type("display_data")] == [
                ["application/vnd.cellbox.chart+json", "image/png", "text/plain"]]  # E2B's chart too
            ws.execute("open('mode.txt', 'w').write('here')")
            path = os.path.join(d.workspace(kid), "mode.txt")
            wait_until(lambda: os.path.exists(path), timeout=10, message=f"{path} on the host")
            req = ws.send_execute("print('loop', flush=True)\nwhile True:\n    pass")
            ws.wait_for(lambda m: m["msg_type"] == "stream" and m["parent_header"].get("msg_id") == req["header"]["msg_id"],
                        what="the loop")
            assert c.post(f"api/kernels/{kid}/interrupt").status_code == 204
            assert ws.collect(req, timeout=15).first("error")["content"]["ename"] == "KeyboardInterrupt"
            res = ws.execute("import os\nos._exit(4)", timeout=30)
            assert res.first("error")["content"]["ename"] == "KernelDied"
            assert "exited with status 4" in res.first("error")["content"]["evalue"]
        assert c.post(f"api/kernels/{kid}/restart").status_code == 200
        with c.ready_ws(kid) as ws:
            assert ws.execute("'v' in dir()").result_data()["text/plain"] == "False"
        c.delete_kernel(kid)
        wait_until(lambda: not os.path.exists(d.workspace(kid)), timeout=30, message="workspace removed")


def _sandbox_pids(kernel_id):
    """The host pids of a sandbox's processes (pid 1 first), from its cgroup."""
    import glob
    for procs in glob.glob(f"/sys/fs/cgroup/**/kernel-{kernel_id}/cgroup.procs", recursive=True):
        with open(procs) as f:
            return sorted(int(line) for line in f if line.strip())
    return []


def _memory_cgroup(kernel_id):
    """The directory of a sandbox's memory cgroup (v1: in the memory hierarchy; v2: its group)."""
    import glob
    for name in ("memory.usage_in_bytes", "memory.current"):
        for path in glob.glob(f"/sys/fs/cgroup/**/kernel-{kernel_id}/{name}", recursive=True):
            return os.path.dirname(path)
    raise AssertionError(f"no memory cgroup for kernel {kernel_id}")


def _memory_charged(kernel_id):
    """Bytes charged to a sandbox's memory cgroup now."""
    group = _memory_cgroup(kernel_id)
    name = "memory.usage_in_bytes" if os.path.exists(os.path.join(group, "memory.usage_in_bytes")) \
        else "memory.current"
    with open(os.path.join(group, name)) as f:
        return int(f.read())


def _describe(pids):
    """pid: command line, parent, for an assertion's message."""
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            with open(f"/proc/{pid}/stat") as f:
                ppid = f.read().rsplit(")", 1)[1].split()[1]
        except OSError:
            cmdline, ppid = "(gone)", "?"
        out.append(f"{pid} (parent {ppid}): {cmdline}")
    return "; ".join(out)


def _blocked_signals(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("SigBlk:"):
                return int(line.split()[1], 16)
    raise AssertionError(f"no SigBlk in /proc/{pid}/status")


def test_zygote_copies_a_kernels_hot_pages_ahead_and_leaves_nothing_behind(make_daemon):
    """The zygote learns, from a probe kernel, the pages every kernel's start writes (hot_pages.h)
    and pins them, so that each kernel's fork copies them; the copies count against the
    sandbox's memory cgroup, not the zygote's, and the io_uring that pins them never reaches a
    sandbox. Its scratch directory is gone once the zygote is ready, and a zygote kernel's pid 1
    (cloned sharing the zygote's memory, with every signal blocked) ends up with none blocked."""
    import re
    d = make_daemon(args=["--pool-size", "0"])
    wait_until(lambda: "zygote ready" in d.log_text(), timeout=90, message="the zygote")
    c = d.client()
    k = c.create_kernel()
    with c.ready_ws(k["id"]) as ws:
        assert ws.execute("21 * 2").result_data()["text/plain"] == "42"
        match = re.search(r"zygote ready \(pid (\d+), .* a new kernel gets (\d+) pages copied "
                          r"(at its fork|by itself)[,)]", d.log_text())
        assert match, d.log_tail()
        zygote_pid, pages, pinned = int(match.group(1)), int(match.group(2)), match.group(3) == "at its fork"
        assert 0 < pages <= 8192  # HOT_PAGES_MAX
        assert "no pages to copy ahead" not in d.log_text()
        if not pinned:  # a host without io_uring: the kernels copy the pages themselves
            assert "copy their hot pages themselves (not pinned: " in d.log_text()
        else:
            with open(f"/proc/{zygote_pid}/status") as f:
                pinned_kib = int(next(line for line in f if line.startswith("VmPin:")).split()[1])
            assert pinned_kib >= pages * 4, (pinned_kib, pages)
            with open(f"/proc/{zygote_pid}/cgroup") as f1, open(f"/proc/{d.pid}/cgroup") as f2:
                assert f1.read() == f2.read()  # back home after the clone
            assert _memory_charged(k["id"]) >= pages * 4096  # the copies are the sandbox's
        for pid in _sandbox_pids(k["id"]):
            descriptors = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
            assert not [target for target in descriptors if "io_uring" in target], descriptors
        leftovers = [name for name in os.listdir("/tmp")
                     if name.startswith(f"cellbox-zygote-ipython-{zygote_pid}-")]
        assert leftovers == []
        pids = _sandbox_pids(k["id"])
        assert len(pids) == 2, pids  # cellbox-init and the kernel
        for pid in pids:
            assert _blocked_signals(pid) == 0, pid
        # The kernel is still a working, freshly seeded one.
        first = ws.execute("import random\nrandom.random()").result_data()["text/plain"]
    k2 = c.create_kernel()
    with c.ready_ws(k2["id"]) as ws:
        assert ws.execute("import random\nrandom.random()").result_data()["text/plain"] != first
    c.delete_kernel(k["id"])
    c.delete_kernel(k2["id"])


def test_where_io_uring_is_refused_kernels_copy_their_hot_pages_themselves():
    """Hosts may turn io_uring off (sysctl kernel.io_uring_disabled, a container's seccomp
    profile): then nothing is pinned, the zygote never stands in a sandbox's memory cgroup, and
    each new kernel copies the learned pages itself, charged to its own sandbox, as before the
    pinning. The daemon says so in its log."""
    import re
    from helpers.daemon import Daemon, built
    tool = built("tests", "without-io-uring")
    assert os.access(tool, os.X_OK), f"{tool} is missing: make builds it for the tests"

    class DaemonWithoutIoUring(Daemon):
        def argv(self):
            return [tool] + super().argv()

    d = DaemonWithoutIoUring(args=["--pool-size", "0"]).start()
    try:
        wait_until(lambda: "zygote ready" in d.log_text(), timeout=90, message="the zygote")
        match = re.search(r"zygote ready \(pid (\d+), .* a new kernel gets (\d+) pages copied by itself[,)]",
                          d.log_text())
        assert match, d.log_tail()
        assert "not pinned: io_uring cannot pin them: Function not implemented" in d.log_text()
        zygote_pid, pages = int(match.group(1)), int(match.group(2))
        with open(f"/proc/{zygote_pid}/status") as f:
            assert next(line for line in f if line.startswith("VmPin:")).split()[1] == "0"
        c = d.client()
        k = c.create_kernel()
        with c.ready_ws(k["id"]) as ws:
            assert ws.execute("21 * 2").result_data()["text/plain"] == "42"
            assert _memory_charged(k["id"]) >= pages * 4096  # the kernel's own copies
        c.delete_kernel(k["id"])
    finally:
        problem = d.finish()
    assert not problem, problem


# The address of one of libpython's functions, in the kernel's memory.
LIBPYTHON_FUNCTION = "import ctypes\nctypes.cast(ctypes.pythonapi.Py_GetVersion, ctypes.c_void_p).value"


def _mapping_of(pid, address):
    """The /proc/PID/smaps entry holding `address`: its range, permissions, name and fields."""
    with open(f"/proc/{pid}/smaps") as f:
        entry = None
        for line in f:
            head = line.split()
            if "-" in head[0] and not head[0].endswith(":"):
                if entry is not None:
                    break
                start, end = (int(x, 16) for x in head[0].split("-"))
                if start <= address < end:
                    entry = {"range": (start, end), "permissions": head[1],
                             "name": head[5] if len(head) > 5 else ""}
            elif entry is not None and head[-1] == "kB":
                entry[head[0].rstrip(":")] = int(head[1])
    assert entry, f"no mapping of pid {pid} holds {address:#x}"
    return entry


def _comm(pid):
    with open(f"/proc/{pid}/comm") as f:
        return f.read().strip()


# /proc/PID/pagemap: one 64-bit entry per page; root reads the frame numbers.
PAGEMAP_PRESENT, PAGEMAP_FRAME = 1 << 63, (1 << 55) - 1


def _page_frame(pid, address):
    """The physical page behind `address` in pid's memory."""
    import struct
    with open(f"/proc/{pid}/pagemap", "rb") as f:
        f.seek(address // 4096 * 8)
        entry = struct.unpack("<Q", f.read(8))[0]
    assert entry & PAGEMAP_PRESENT, f"{address:#x} is not mapped in pid {pid}"
    return entry & PAGEMAP_FRAME


@pytest.mark.parametrize("huge", [True, False])
def test_the_code_kernels_run_is_on_huge_pages_the_zygote_shares(make_daemon, huge):
    """The zygote moves the windows of library code its probe ran onto 2 MiB pages
    (huge_code.h): a kernel runs libpython's functions from the very huge page the zygote
    holds, not a copy, and not the file's 4 KiB pages. --huge-code-pages=false keeps those.
    Here on transparent huge pages: the host's hugetlb pool is empty (the next test fills it)."""
    import re
    if huge and hugetlb.pages_free():
        pytest.skip("this host's hugetlb pool has pages free: the zygote takes those (next test)")
    d = make_daemon(args=["--pool-size", "0", f"--huge-code-pages={str(huge).lower()}"])
    zygote = _zygote_pid(d)
    shared = re.search(r"shares (\d+) MiB of code on 2 MiB pages", d.log_text())
    c = d.client()
    k = c.create_kernel()
    with c.ready_ws(k["id"]) as ws:
        address = int(ws.execute(LIBPYTHON_FUNCTION).result_data()["text/plain"])
        kernel = next(pid for pid in _sandbox_pids(k["id"]) if _comm(pid) == "cellbox-kernel")
        in_kernel, in_zygote = _mapping_of(kernel, address), _mapping_of(zygote, address)
        if huge:
            assert shared and int(shared.group(1)) >= 2, d.log_tail()
            assert "library code not moved" not in d.log_text()
            for mapping in (in_kernel, in_zygote):
                assert mapping["name"] == "" and mapping["permissions"] == "r-xp", mapping
                assert mapping["AnonHugePages"] >= 2048, mapping
            assert _page_frame(kernel, address) == _page_frame(zygote, address)
        else:
            assert shared is None  # not said where not done
            assert in_kernel["name"].endswith("/libpython3.11.so.1.0"), in_kernel
            assert in_kernel["AnonHugePages"] == 0
        assert ws.execute("21 * 2").result_data()["text/plain"] == "42"
    c.delete_kernel(k["id"])


@pytest.fixture
def hugetlb_pool():
    """Pages reserved in the host's hugetlb pool for one test (requested before make_daemon, so
    given back after the daemon is gone)."""
    with hugetlb.reserved_pages():
        yield


def test_with_a_hugetlb_pool_the_code_is_on_its_pages_sealed(hugetlb_pool, make_daemon):
    """Where the host has hugetlb pages free, the zygote copies the code onto those, in a memfd
    sealed against writes and mapped shared (huge_code.h): the kernel runs libpython from the
    zygote's very page, and cannot make it writable (EACCES) — it could otherwise write what
    every kernel runs. It runs on, and so does the next kernel."""
    import re
    d = make_daemon(args=["--pool-size", "0", "--huge-code-pages=true"])
    zygote = _zygote_pid(d)
    shared = re.search(r"shares (\d+) MiB of code on 2 MiB pages \((\d+) MiB from the hugetlb pool\)",
                       d.log_text())
    assert shared and int(shared.group(1)) >= 2 and shared.group(1) == shared.group(2), d.log_tail()
    c = d.client()
    k = c.create_kernel()
    with c.ready_ws(k["id"]) as ws:
        address = int(ws.execute(LIBPYTHON_FUNCTION).result_data()["text/plain"])
        kernel = next(pid for pid in _sandbox_pids(k["id"]) if _comm(pid) == "cellbox-kernel")
        for pid in (kernel, zygote):
            mapping = _mapping_of(pid, address)
            assert mapping["name"] == "/memfd:cellbox-huge-code", mapping
            assert mapping["permissions"] == "r-xs" and mapping["Shared_Hugetlb"] >= 2048, mapping
        assert _page_frame(kernel, address) == _page_frame(zygote, address)
        with open(f"/proc/{zygote}/mem", "rb") as mem:
            mem.seek(address & ~4095)
            code_before = mem.read(4096)
        refused = ws.execute(
            "import ctypes\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]\n"
            f"page = {address} & ~4095\n"
            "(libc.mprotect(page, 4096, 3), ctypes.get_errno())").result_data()["text/plain"]
        assert refused == "(-1, 13)"  # EACCES
        assert ws.execute("21 * 2").result_data()["text/plain"] == "42"
    c.delete_kernel(k["id"])
    with open(f"/proc/{zygote}/mem", "rb") as mem:  # the zygote's code is as it was
        mem.seek(address & ~4095)
        assert mem.read(4096) == code_before
    k2 = c.create_kernel()
    with c.ready_ws(k2["id"]) as ws:
        assert ws.execute("21 * 2").result_data()["text/plain"] == "42"
    c.delete_kernel(k2["id"])


def _pages_charged_to(pid, cgroup_inodes):
    """How many of process `pid`'s present pages are charged to one of the memory cgroups whose
    directories have these inode numbers (/proc/PID/pagemap gives each page's frame, and
    /proc/kpagecgroup each frame's memory cgroup)."""
    import struct
    found = 0
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/pagemap", "rb") as pagemap, \
            open("/proc/kpagecgroup", "rb") as kpagecgroup:
        for line in maps:
            start, end = (int(x, 16) for x in line.split()[0].split("-"))
            if end - start > 1 << 30:  # a sparse reservation, not memory in use
                continue
            pagemap.seek(start // 4096 * 8)
            entries = pagemap.read((end - start) // 4096 * 8)
            for (entry,) in struct.iter_unpack("<Q", entries):
                if entry & PAGEMAP_PRESENT and entry & PAGEMAP_FRAME:
                    kpagecgroup.seek((entry & PAGEMAP_FRAME) * 8)
                    found += struct.unpack("<Q", kpagecgroup.read(8))[0] in cgroup_inodes
    return found


def test_no_page_of_the_zygote_is_charged_to_a_sandbox(make_daemon):
    """The zygote stands in each new sandbox's memory cgroup while it clones it (the pages the
    kernel's fork copies are charged there). A page that the zygote, or pid 1 in its memory,
    copied in that window would stay charged to that sandbox for as long as the zygote or a
    later kernel held it: the sandbox's group could not be freed once it was deleted. The stacks
    both run on are pinned for that reason, and the page above the clone's stack is its own
    (zygote.c, sandbox.c)."""
    d = make_daemon(args=["--pool-size", "0"])
    zygote_pid = _zygote_pid(d)
    if "at its fork" not in d.log_text():
        pytest.skip("this host cannot pin pages (no io_uring): the zygote never enters a sandbox's group")
    c = d.client()
    kernels = []
    for _ in range(3):
        k = c.create_kernel()
        with c.ready_ws(k["id"]) as ws:
            assert ws.execute("1 + 1").result_data()["text/plain"] == "2"
        kernels.append(k["id"])
    inodes = {os.stat(_memory_cgroup(kid)).st_ino for kid in kernels}
    assert len(inodes) == 3, inodes
    assert _pages_charged_to(zygote_pid, inodes) == 0
    # ...while each kernel's own copies are its sandbox's (the check itself sees charges).
    kernel_pid = _sandbox_pids(kernels[-1])[-1]
    assert _pages_charged_to(kernel_pid, inodes) > 1000
    for kid in kernels:
        c.delete_kernel(kid)


def test_the_next_sandboxes_are_prepared_ahead_and_removed_with_the_daemon(make_daemon):
    """The daemon's part of a start (workspace volume, cgroup) is made ahead for the default
    limits, two sets, each under the id the kernel that takes it gets; other limits get their
    own; nothing of a prepared sandbox outlives the daemon."""
    import glob
    d = make_daemon(args=["--pool-size", "0"])
    c = d.client()
    workspaces = os.path.join(d.data_dir, "workspaces")
    wait_until(lambda: len(os.listdir(workspaces)) == 2, timeout=30, message="two prepared workspaces")
    prepared = set(os.listdir(workspaces))
    assert c.get("api/kernels").json() == []  # prepared, not kernels
    k = c.create_kernel()
    assert k["id"] in prepared
    with c.ready_ws(k["id"]) as ws:
        assert ws.execute("import os\nsorted(os.listdir('.'))").result_data()["text/plain"] == "[]"
        ws.execute("open('taken.txt', 'w').write('mine')")
    wait_until(lambda: os.path.exists(os.path.join(workspaces, k["id"], "taken.txt")), timeout=10,
               message="the file in the taken workspace")
    wait_until(lambda: len(os.listdir(workspaces)) == 3, timeout=30, message="another prepared one")
    following = set(os.listdir(workspaces)) - {k["id"]}
    other = c.create_kernel(limits={"memory": "256M"})  # other limits: built for it, not taken
    assert other["id"] not in following
    assert following <= set(os.listdir(workspaces))
    c.delete_kernel(other["id"])
    c.delete_kernel(k["id"])
    d.stop()
    assert os.listdir(workspaces) == []
    assert os.listdir(os.path.join(d.data_dir, "volumes")) == []
    for prepared_id in following:
        assert glob.glob(f"/sys/fs/cgroup/**/kernel-{prepared_id}", recursive=True) == []


def _volume_helper(d):
    """The pid of the daemon's volume helper (a child named cellbox-volumes), or None."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        if int(fields[1]) == d.pid and name == "cellbox-volumes":
            return int(entry)
    return None


def test_workspace_volumes_are_made_and_removed_by_a_helper_and_without_it(make_daemon):
    """ext4 workspace volumes are made and removed by the daemon's volume helper process, off
    its loop; a deleted kernel's volume goes all the same. With the helper killed (with jobs
    unanswered) the daemon says so, makes and removes volumes itself, and nothing is left
    behind."""
    import signal
    import time
    d = make_daemon(args=["--pool-size", "0"])
    c = d.client()
    helper = _volume_helper(d)
    assert helper is not None
    volumes = os.path.join(d.data_dir, "volumes")
    k = c.create_kernel()
    with c.ready_ws(k["id"]) as ws:
        assert ws.execute("open('/workspace/a', 'w').write('x')").result_data()["text/plain"] == "1"
    c.delete_kernel(k["id"])
    wait_until(lambda: not os.path.exists(os.path.join(volumes, k["id"] + ".img")), timeout=30,
               message="the deleted kernel's image removed by the helper")
    assert not os.path.exists(d.workspace(k["id"]))
    # Held still, the helper gets the next preparations (the two prepared sets are taken) and
    # dies with them unanswered: those sets are given up and whatever they left is removed.
    os.kill(helper, signal.SIGSTOP)
    kernels = [c.create_kernel() for _ in range(2)]
    time.sleep(0.5)  # the next preparations are sent 50 ms after a take
    os.kill(helper, signal.SIGKILL)
    wait_until(lambda: "volume helper" in d.log_text() and _volume_helper(d) is None, timeout=30,
               message="the daemon to notice its volume helper is gone")
    # Made in the daemon now; another size, so the default size's template (the helper's, which
    # died with it) is removed at the stop only because the daemon noted it.
    kernels += [c.create_kernel(limits={"disk": "512M"}) for _ in range(3)]
    for each in kernels:
        with c.ready_ws(each["id"]) as ws:
            assert ws.execute("import os\nos.path.ismount('/workspace')").result_data()["text/plain"] == "True"
    for each in kernels:
        c.delete_kernel(each["id"])
        assert not os.path.exists(os.path.join(volumes, each["id"] + ".img"))
    assert d.alive()
    d.stop()
    assert os.listdir(volumes) == []
    assert os.listdir(os.path.join(d.data_dir, "workspaces")) == []


def _zygote_pid(d):
    import re
    wait_until(lambda: "zygote ready" in d.log_text(), timeout=90, message="the zygote")
    return int(re.findall(r"zygote ready \(pid (\d+)", d.log_text())[-1])


def test_a_burst_of_creates_is_cloned_while_the_daemon_goes_on(make_daemon):
    """Clone requests go to the zygote without the daemon waiting for each answer (several in
    flight, the rest queued): a burst of creates gives as many sandboxes, each with its own two
    processes and its own pid, and the daemon answers other requests meanwhile."""
    import concurrent.futures
    d = make_daemon(args=["--pool-size", "0"])
    _zygote_pid(d)
    c = d.client()
    with concurrent.futures.ThreadPoolExecutor(max_workers=12) as pool:
        kernels = list(pool.map(lambda _: d.client().create_kernel(), range(12)))
    assert c.get("api").status_code == 200
    seen = set()
    for k in kernels:
        with c.ready_ws(k["id"]) as ws:
            assert ws.execute("import os\nos.getpid()").result_data()["text/plain"] == "2"
        pids = _sandbox_pids(k["id"])
        assert len(pids) == 2, pids  # cellbox-init and the kernel: cloned once, not also exec'd
        assert not seen & set(pids)
        seen |= set(pids)
    for k in kernels:
        c.delete_kernel(k["id"])
    assert "starting it by exec" not in d.log_text()


def test_a_kernel_deleted_before_the_zygote_answers_leaves_nothing(make_daemon):
    """Deleted right after the create (its clone request still queued or in flight): a queued
    request is dropped, a sent one is finished and its clone killed before the volume and cgroup
    go; no process or cgroup is left, the zygote keeps answering, and later kernels are
    unaffected (each with its own two processes)."""
    import glob
    d = make_daemon(args=["--pool-size", "0"])
    _zygote_pid(d)
    c = d.client()
    ids = []
    for _ in range(6):
        k = c.create_kernel()
        c.delete_kernel(k["id"])
        ids.append(k["id"])
    def all_gone():
        return all(not glob.glob(f"/sys/fs/cgroup/**/kernel-{i}", recursive=True) for i in ids)
    wait_until(all_gone, timeout=30, message="the deleted kernels' cgroups to be removed")
    k = c.create_kernel()
    with c.ready_ws(k["id"]) as ws:
        assert ws.execute("6 * 7").result_data()["text/plain"] == "42"
    pids = _sandbox_pids(k["id"])
    assert len(pids) == 2, _describe(pids) + "\n" + d.log_tail()
    assert "did not answer" not in d.log_text(), d.log_tail()
    c.delete_kernel(k["id"])
    assert d.alive()


def test_kernels_start_by_exec_when_the_zygote_dies_with_requests_in_flight(make_daemon):
    """The zygote killed while creates wait for its answers (or before a request could be sent):
    each of those kernels is started by exec instead, and the zygote comes back."""
    import concurrent.futures
    import signal
    d = make_daemon(args=["--pool-size", "0"])
    zygote = _zygote_pid(d)
    c = d.client()
    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
        creates = [pool.submit(lambda: d.client().create_kernel()) for _ in range(6)]
        os.kill(zygote, signal.SIGKILL)
        kernels = [f.result() for f in creates]
    for k in kernels:
        with c.ready_ws(k["id"]) as ws:
            assert ws.execute("6 * 7").result_data()["text/plain"] == "42"
        assert len(_sandbox_pids(k["id"])) == 2
    wait_until(lambda: d.log_text().count("zygote ready") >= 2, timeout=90,
               message="the zygote to come back")
    for k in kernels:
        c.delete_kernel(k["id"])
    assert d.alive()


def _cpu_weight(kernel_id):
    """The sandbox group's CPU weight relative to the default: cpu.shares / 1024 (v1) or
    cpu.weight / 100 (v2)."""
    import glob
    for path in glob.glob(f"/sys/fs/cgroup/**/kernel-{kernel_id}/cpu.shares", recursive=True):
        return int(open(path).read()) / 1024
    for path in glob.glob(f"/sys/fs/cgroup/**/kernel-{kernel_id}/cpu.weight", recursive=True):
        return int(open(path).read()) / 100
    pytest.skip("no cpu controller for the sandbox groups on this host")


def _v2_pids_max(kernel_id):
    """The sandbox group's pids.max on cgroup v2 (None on v1, where the zygote does not stand in
    the group's pids hierarchy)."""
    import glob
    for path in glob.glob(f"/sys/fs/cgroup/**/kernel-{kernel_id}/memory.max", recursive=True):
        with open(os.path.join(os.path.dirname(path), "pids.max")) as f:
            return f.read().strip()
    return None


def test_a_new_sandbox_outweighs_its_neighbours_only_while_the_zygote_waits_on_it(make_daemon):
    """While the zygote waits for a new sandbox's pid 1 to set up (every other create waits
    too), the sandbox's group has 100 times the default CPU weight, and on cgroup v2 room for
    one more process (the zygote stands in the group then); once the zygote has answered, and
    before the user's first cell runs, it is an ordinary group again."""
    import signal
    d = make_daemon(args=["--pool-size", "0", "--pids-limit", "64"])
    zygote = _zygote_pid(d)
    c = d.client()
    os.kill(zygote, signal.SIGSTOP)  # the request stays in flight: the window, held open
    try:
        k = c.create_kernel()
        assert _cpu_weight(k["id"]) == 100
        assert _v2_pids_max(k["id"]) in (None, "65")
    finally:
        os.kill(zygote, signal.SIGCONT)
    with c.ready_ws(k["id"]) as ws:
        assert ws.execute("6 * 7").result_data()["text/plain"] == "42"
    assert _cpu_weight(k["id"]) == 1
    assert _v2_pids_max(k["id"]) in (None, "64")
    c.delete_kernel(k["id"])
    assert d.alive()


def test_a_volume_helper_that_dies_leaves_no_template_behind(make_daemon):
    """The helper makes the template image that volumes are copied from; killed, it cannot
    remove it at the stop, and the daemon, which never made a volume itself, still does."""
    import signal
    d = make_daemon(args=["--pool-size", "0"])
    workspaces = os.path.join(d.data_dir, "workspaces")
    wait_until(lambda: len(os.listdir(workspaces)) == 2, timeout=30, message="two prepared workspaces")
    volumes = os.path.join(d.data_dir, "volumes")
    assert any(name.startswith("template-") for name in os.listdir(volumes))
    os.kill(_volume_helper(d), signal.SIGKILL)
    wait_until(lambda: "volume helper" in d.log_text(), timeout=30,
               message="the daemon to notice its volume helper is gone")
    d.stop()
    assert os.listdir(volumes) == []
    assert os.listdir(workspaces) == []
