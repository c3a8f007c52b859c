"""Class 1: reading host secrets — /etc/shadow, /root, /home, the daemon's token and
environment (through /proc/<pid>/environ and cmdline, config files), other sandboxes'
workspaces by their host path."""
import os

import pytest

pytestmark = pytest.mark.cellbox_only


def test_etc_shadow_and_private_keys_are_not_there(box, hostile):
    got = hostile.json(r"""
import os
_result = {}
for p in ('/etc/shadow', '/etc/gshadow', '/etc/ssl/private', '/etc/sudoers', '/etc/ssh',
          '/etc/machine-id', '/var/lib', '/var/log', '/sys'):
    try:
        if os.path.isdir(p):
            _result[p] = ['listed', os.listdir(p)]
        else:
            _result[p] = ['read', len(open(p, 'rb').read())]
    except OSError as e:
        _result[p] = ['error', e.errno]
_result['passwd'] = open('/etc/passwd').read()
""")
    for path in ('/etc/shadow', '/etc/gshadow', '/etc/ssl/private', '/etc/sudoers', '/etc/ssh',
                 '/etc/machine-id', '/var/lib', '/var/log', '/sys'):
        assert got[path] == ["error", 2], f"{path} is visible in the sandbox: {got[path]}"
    # The sandbox's passwd is generated: root, the sandbox user, nobody; nothing of the host's.
    with open("/etc/passwd") as f:
        host_users = {line.split(":")[0] for line in f if line.strip()}
    sandbox_users = {line.split(":")[0] for line in got["passwd"].splitlines() if line.strip()}
    assert sandbox_users == {"root", "user", "nobody"}, got["passwd"]
    assert f"user:x:{hostile.uid}:{hostile.uid}:" in got["passwd"]
    assert not (host_users - {"root", "nobody"}) & sandbox_users
    box.assert_contained()


def test_root_is_empty_and_home_holds_only_the_workspace(box, hostile):
    """/home has one entry, user, which is the sandbox's own workspace under E2B's name (nothing
    of the host's /home); /root is empty and read-only."""
    got = hostile.json(r"""
import os
_result = {p: sorted(os.listdir(p)) for p in ('/root', '/home')}
_result['root_writable'] = os.access('/root', os.W_OK)
_result['home_writable'] = os.access('/home', os.W_OK)
_result['home_is_workspace'] = os.path.samefile('/home/user', '/workspace')
for p in ('/root/.ssh/id_rsa', '/root/.bash_history', '/home/cloudsdk'):
    try:
        open(p, 'rb'); _result[p] = 'opened'
    except OSError as e:
        _result[p] = e.errno
""")
    assert got["/root"] == [] and got["/home"] == ["user"], got
    assert got["home_is_workspace"] is True, got
    assert got["root_writable"] is False and got["home_writable"] is False, got
    for p in ('/root/.ssh/id_rsa', '/root/.bash_history', '/home/cloudsdk'):
        assert got[p] == 2, (p, got[p])
    box.assert_contained()


def test_daemon_token_not_in_any_process_environ(box, hostile):
    """The daemon's token (argv) and a secret in its environment appear in no /proc/*/environ
    the sandbox can read; the daemon's own pid is not even there."""
    token, secret = box.daemon.token, box.secret
    got = hostile.json(f"""
import os
_result = {{'readable': [], 'hits': [], 'denied': []}}
for pid in [p for p in os.listdir('/proc') if p.isdigit()] + ['self', 'thread-self']:
    try:
        data = open(f'/proc/{{pid}}/environ', 'rb').read()
    except OSError as e:
        _result['denied'].append([pid, e.errno]); continue
    _result['readable'].append(pid)
    for needle in ({token!r}, {secret!r}):
        if needle.encode() in data:
            _result['hits'].append([pid, needle[:6]])
_result['env_has'] = [n for n in ({token!r}, {secret!r}) if any(n in v for v in os.environ.values())]
_result['env_keys'] = sorted(os.environ)
""")
    assert got["hits"] == [], f"the daemon's secrets are readable in the sandbox: {got['hits']}"
    assert got["env_has"] == []
    assert not [k for k in got["env_keys"] if k.startswith(("HOST_SECRET", "CELLBOX_TOKEN", "ASAN"))]
    box.assert_contained()


def test_daemon_token_not_in_any_process_cmdline(box, hostile):
    """No process visible in the sandbox shows the daemon's command line (it carries --token
    and the host data directory). The sandbox's pid 1 is the daemon forked without exec, so
    its cmdline is the daemon's argv unless the daemon wipes or replaces it."""
    token = box.daemon.token
    got = hostile.json(r"""
import os
_result = {}
for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
    try:
        _result[pid] = open(f'/proc/{pid}/cmdline', 'rb').read().decode('utf-8', 'replace')
    except OSError as e:
        _result[pid] = e.errno
""")
    leaks = {pid: cmd for pid, cmd in got.items() if isinstance(cmd, str) and
             (token in cmd or box.daemon.data_dir in cmd)}
    assert not leaks, ("the daemon's token / data dir can be read from /proc/<pid>/cmdline in the "
                       f"sandbox: {leaks}")
    box.assert_contained()


def test_daemon_and_host_processes_are_invisible(box, hostile):
    dpid = box.daemon.pid
    nb_host_pid = box.neighbour.kernel_host_pid()
    assert nb_host_pid, "cannot find the neighbour's kernel on the host"
    got = hostile.json(f"""
import os
_result = {{'pids': sorted(int(p) for p in os.listdir('/proc') if p.isdigit())}}
for name, pid in (('daemon', {dpid}), ('neighbour', {nb_host_pid}), ('init', 1)):
    _result[name] = os.path.exists(f'/proc/{{pid}}/status') and open(f'/proc/{{pid}}/status').read().split('\\n')[0]
""")
    assert got["pids"] == [1, 2], f"the sandbox sees processes besides its own: {got['pids']}"
    assert got["daemon"] is False and got["neighbour"] is False, got
    box.assert_contained()


def test_no_token_in_files_the_sandbox_can_read(box, hostile):
    """Config files, /opt/cellbox, /tmp, /etc, the workspace: the token and the daemon's
    environment secret are in none of them; the host data dir does not exist inside."""
    token, secret = box.daemon.token, box.secret
    got = hostile.json(f"""
import os
_result = {{'hits': [], 'files': 0}}
needles = [{token!r}.encode(), {secret!r}.encode()]
for top in ('/etc', '/opt/cellbox', '/tmp', '/workspace', '/root', '/home', '/dev/shm'):
    for root, dirs, files in os.walk(top):
        for f in files:
            p = os.path.join(root, f)
            try:
                if os.path.islink(p) or os.path.getsize(p) > (8 << 20):
                    continue
                data = open(p, 'rb').read()
            except OSError:
                continue
            _result['files'] += 1
            if any(n in data for n in needles):
                _result['hits'].append(p)
_result['data_dir'] = os.path.exists({box.daemon.data_dir!r})
_result['log'] = os.path.exists({box.daemon.log_path!r})
""", timeout=120)
    assert got["files"] > 10, got
    assert got["hits"] == [], f"files inside the sandbox contain the daemon's secrets: {got['hits']}"
    assert got["data_dir"] is False and got["log"] is False
    box.assert_contained()


def test_other_sandbox_workspace_by_host_path(box, hostile):
    """The neighbour's workspace, by its host path and through /proc/<pid>/root, is out of reach."""
    nb = box.neighbour
    host_path = os.path.join(nb.workspace, "neighbour.txt")
    assert os.path.exists(host_path)
    nb_host_pid = nb.kernel_host_pid()
    got = hostile.json(f"""
import os
_result = {{}}
for p in ({host_path!r}, {os.path.dirname(host_path)!r}, '/proc/{nb_host_pid}/root/workspace/neighbour.txt',
          '/proc/{nb_host_pid}/cwd/neighbour.txt', '/proc/1/root/workspace', '/proc/1/cwd'):
    try:
        _result[p] = ['read', open(p).read()] if not os.path.isdir(p) else ['dir', os.listdir(p)]
    except OSError as e:
        _result[p] = ['error', e.errno]
""")
    for p, outcome in got.items():
        assert outcome[0] == "error" and outcome[1] in (2, 13), f"{p}: {outcome}"
    assert got[host_path] == ["error", 2]
    box.assert_contained()


def test_neighbour_files_unreadable_even_with_its_uid_known(box, fresh):
    """Two sandboxes run as different uids; one cannot open the other's files even through
    a path it makes up, and it cannot switch to the other's uid."""
    k = fresh()
    assert k.uid != box.neighbour.uid
    got = k.json(f"""
import os
_result = {{}}
try:
    os.setuid({box.neighbour.uid}); _result['setuid'] = 'ok'
except OSError as e:
    _result['setuid'] = e.errno
_result['me'] = os.getuid()
""")
    assert got == {"setuid": 1, "me": k.uid}
    box.assert_contained()


# ------------------------------------------------------------------ the kernel's own memory

MEMORY_SCAN = r"""
import ctypes, hashlib
def _scan(prefix, digest, length):
    '''Where in this process's anonymous memory (heap, stack, anonymous maps) the secret whose
    sha256 is `digest` lies; the secret itself never appears in this cell's code.'''
    hits, regions = [], 0
    for line in open('/proc/self/maps'):
        parts = line.split()
        name = parts[5] if len(parts) > 5 else ''
        if 'r' not in parts[1] or name not in ('', '[heap]', '[stack]'):
            continue
        lo, hi = (int(x, 16) for x in parts[0].split('-'))
        if hi - lo > (1 << 30):
            continue
        data = ctypes.string_at(lo, hi - lo)
        regions += 1
        i = data.find(prefix)
        while i >= 0:
            if hashlib.sha256(data[i:i + length]).hexdigest() == digest:
                hits.append(name or hex(lo))
                break
            i = data.find(prefix, i + 1)
    return hits, regions
"""


def scan_for(kernel, secret_text):
    import hashlib
    secret = secret_text.encode()
    return kernel.json(MEMORY_SCAN + f"""
_hits, _regions = _scan({secret[:8]!r}, {hashlib.sha256(secret).hexdigest()!r}, {len(secret)})
_result = {{'hits': _hits, 'regions': _regions}}
""", timeout=120)


def test_kernel_memory_holds_no_daemon_secret(box, fresh):
    """Whether the kernel was exec'd or cloned from a zygote, nothing of the daemon's token or
    environment is in the kernel process's memory (readable with ctypes by any cell)."""
    k = fresh()
    for name, value in (("token", box.daemon.token), ("environment secret", box.secret)):
        got = scan_for(k, value)
        assert got["regions"] > 0, got
        assert got["hits"] == [], f"the daemon's {name} is in the kernel's memory: {got['hits']}"
    box.assert_contained()


def test_no_other_kernels_spawn_request_in_memory(box, fresh):
    """Kernel A is started with a secret in its environment (KERNEL_API_KEY, e.g. a user's API
    key); kernel B, started after it, must not find that secret anywhere in its own memory.
    With a zygote, every sandbox is a copy of the zygote's memory, which saw A's spawn request."""
    import secrets as _secrets
    secret = "sk-" + _secrets.token_hex(24)
    # non-default limits: both kernels are started for the request (not taken from the pool)
    a = fresh(limits={"open_files": 1000}, env={"KERNEL_API_KEY": "p" * 20000 + secret})
    assert a.json("import os\n_result = os.environ['KERNEL_API_KEY'][-51:]") == secret
    b = fresh(limits={"open_files": 1001})
    got = scan_for(b, secret)
    assert got["regions"] > 0, got
    assert got["hits"] == [], (f"kernel {b.id} can read kernel {a.id}'s environment secret in its own "
                               f"memory ({got['hits']}): the zygote hands its leftovers to every clone")
    box.assert_contained()


def test_daemon_host_paths_not_disclosed(box, fresh):
    """Where the daemon keeps its data (workspaces, volumes, the zygote's cache) is none of the
    sandbox's business: no environment variable, module path, sys.path entry or library
    configuration inside the kernel names the host data directory."""
    k = fresh()
    data_dir = box.daemon.data_dir
    got = k.json(f"""
import os, sys
found = {{}}
needle = {data_dir!r}
for key, value in os.environ.items():
    if needle in value:
        found['env ' + key] = value
for p in sys.path:
    if needle in str(p):
        found['sys.path'] = p
for name, mod in list(sys.modules.items()):
    f = getattr(mod, '__file__', None) or ''
    if needle in str(f):
        found['module ' + name] = f
import matplotlib, IPython
for what, fn in (('matplotlib configdir', matplotlib.get_configdir), ('matplotlib cachedir', matplotlib.get_cachedir),
                 ('ipython dir', lambda: IPython.get_ipython().ipython_dir),
                 ('ipython profile', lambda: IPython.get_ipython().profile_dir.location)):
    try:
        value = str(fn())
    except Exception as e:
        value = repr(e)
    if needle in value:
        found[what] = value
_result = found
""")
    assert got == {}, f"the kernel can learn the daemon's host data directory: {got}"
    box.assert_contained()


def test_random_streams_differ_between_kernels(box, fresh):
    """Kernels cloned from one preloaded interpreter must not share random state: one sandbox
    must not be able to predict another's random numbers, uuids or temporary names."""
    code = """
import random, uuid, tempfile
import numpy as np
_result = [random.random(), float(np.random.random()), float(np.random.normal()),
           str(uuid.uuid4()), next(tempfile._get_candidate_names())]
"""
    a, b = fresh(), fresh()
    ra, rb = a.json(code), b.json(code)
    for name, x, y in zip(("random", "numpy", "numpy normal", "uuid4", "tempfile"), ra, rb):
        assert x != y, f"two kernels drew the same {name} value: {x!r}"
    box.assert_contained()
