"""Named volumes (issue 20, part G) against hostile cells: a volume is a disk several sandboxes
share, so what one plants there must not reach the host or a sandbox without the volume.

- Links planted in a volume resolve inside each sandbox's own root, for its processes and for
  the daemon's file API; the host's files are untouched.
- A setuid binary written into a volume is neither root's on disk nor setuid in effect
  (nosuid), and its owner on the host is the one unprivileged volume id.
- A sandbox without the volume finds no trace of it: no mount, no path, no file.
- The mount cannot be undone or moved from inside (mount syscalls are refused).
Each ends with box.assert_contained(): host unchanged, server healthy, neighbour unaffected."""
import os

import pytest

from seclib import PWN, SandboxKernel

pytestmark = pytest.mark.cellbox_only

VOLUME = "hostile-vol"
VOLUME_OWNER = 65533  # sandbox/volume_shared.h


@pytest.fixture(scope="module")
def volume(box):
    r = box.client.post("v1/volumes", json={"name": VOLUME, "size": "32M"})
    assert r.status_code == 201, r.text
    yield os.path.join(box.daemon.data_dir, "named-volumes", f"volume-{VOLUME}")
    box.client.delete(f"v1/volumes/{VOLUME}", params={"force": "true"})


def mounting(box, path="/mnt/vol"):
    """A proven kernel of a new /v1 sandbox that mounts the volume at `path`."""
    r = box.client.post("v1/sandboxes", json={"volumes": {VOLUME: path}, "timeout_s": 0})
    assert r.status_code == 201, r.text
    k = SandboxKernel(box, {"id": r.json()["id"]})
    box.kernels.append(k)
    return k


def test_links_in_a_volume_stay_inside_each_sandbox(box, volume):
    planter = mounting(box)
    planter.ok(f"""
import os
os.symlink('/', '/mnt/vol/root-link')
os.symlink('/etc/passwd', '/mnt/vol/passwd-link')
os.symlink('{box.host.canary_path}', '/mnt/vol/canary-link')
""")
    reader = mounting(box, "/data/other")
    got = reader.json("""
import os
def read(p):
    try:
        return open(p).read()
    except OSError as e:
        return type(e).__name__
_result = {'passwd': read('/data/other/passwd-link'), 'via_root': read('/data/other/root-link/etc/passwd'),
           'canary': read('/data/other/canary-link'),
           'write': read('/data/other/root-link/etc/hostname')}
try:
    open('/data/other/root-link/etc/{PWN}', 'w').write('x')
    _result['escape_write'] = 'written'
except OSError as e:
    _result['escape_write'] = type(e).__name__
""".replace("{PWN}", PWN))
    # the sandbox's own /etc/passwd (its user is "cellbox sandbox"), never the host's
    assert "cellbox sandbox" in got["passwd"] and "cellbox sandbox" in got["via_root"], got
    assert got["canary"] == "FileNotFoundError", got
    assert got["escape_write"] in ("PermissionError", "OSError"), got
    # the daemon's file API follows the same links inside the sandbox's root too
    r = box.client.get(f"v1/sandboxes/{reader.id}/files", params={"path": "/data/other/passwd-link"})
    assert r.status_code == 200 and b"cellbox sandbox" in r.content, r.text[:300]
    r = box.client.get(f"v1/sandboxes/{reader.id}/files", params={"path": "/data/other/canary-link"})
    assert r.status_code == 404, r.text[:300]
    # on the host the links are links, never followed
    assert os.path.islink(os.path.join(volume, "root-link"))
    box.assert_contained()


def test_setuid_binary_in_a_volume_is_never_root_and_never_effective(box, volume):
    k = mounting(box)
    got = k.json("""
import os, shutil, subprocess
shutil.copy('/usr/bin/id', '/mnt/vol/id-suid')
os.chmod('/mnt/vol/id-suid', 0o6755)
st = os.stat('/mnt/vol/id-suid')
out = subprocess.run(['/mnt/vol/id-suid', '-u'], capture_output=True, text=True).stdout.strip()
opts = [line.split()[5] for line in open('/proc/self/mountinfo') if line.split()[4] == '/mnt/vol'][0]
_result = {'mode': oct(st.st_mode & 0o7777), 'owner': st.st_uid, 'euid_when_run': out, 'uid': os.getuid(),
           'options': opts.split(',')}
""")
    assert got["owner"] == got["uid"] and got["euid_when_run"] == str(got["uid"]), got
    assert "nosuid" in got["options"] and "nodev" in got["options"], got
    st = os.stat(os.path.join(volume, "id-suid"))
    assert (st.st_uid, st.st_gid) == (VOLUME_OWNER, VOLUME_OWNER), st
    box.assert_contained()


def test_a_sandbox_without_the_volume_finds_no_trace_of_it(box, volume):
    writer = mounting(box)
    writer.ok("open('/mnt/vol/marker-7f3a', 'w').write('private to the volume')")
    outsider = box.kernel()
    got = outsider.json("""
import os, subprocess
found = subprocess.run('find / -xdev -name "marker-7f3a" 2>/dev/null; find /tmp /workspace /dev/shm '
                       '-name "marker-7f3a" 2>/dev/null', shell=True, capture_output=True, text=True).stdout
_result = {'found': found, 'mnt': os.path.exists('/mnt/vol'), 'mountinfo': open('/proc/self/mountinfo').read(),
           'list': os.path.exists('/etc/cellbox-volumes')}
""", timeout=120)
    assert got["found"] == "" and got["mnt"] is False and got["list"] is False, got
    assert VOLUME not in got["mountinfo"] and "named-volumes" not in got["mountinfo"], got
    assert "volume-views" not in got["mountinfo"], got
    box.assert_contained()


def test_the_mount_cannot_be_undone_or_moved_from_inside(box, volume):
    k = mounting(box)
    got = k.json("""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def call(rc):
    return 0 if rc == 0 else ctypes.get_errno()
os.makedirs('/tmp/elsewhere', exist_ok=True)
_result = {'umount': call(libc.umount2(b'/mnt/vol', 2)),
           'bind': call(libc.mount(b'/mnt/vol', b'/tmp/elsewhere', None, 4096, None)),
           'remount_suid': call(libc.mount(None, b'/mnt/vol', None, 32 | 4096, None)),
           'still_there': os.path.ismount('/mnt/vol')}
""")
    assert got["umount"] != 0 and got["bind"] != 0 and got["remount_suid"] != 0, got
    assert got["still_there"] is True, got
    box.assert_contained()
