"""Templates with files of their own (issue 22) against hostile cells and hostile tarballs: a
template is read-only in its sandboxes and shared by all of them, so nothing one sandbox does
may reach the template, another sandbox, another template or the host.

- A sandbox cannot write, remove, rename or re-mode its template's files (/usr/local, /opt, /app),
  nor add one; the layers and the view on the host stay byte for byte.
- What a sandbox writes elsewhere (its home, /tmp) never shows in another sandbox of the same
  template, nor in the template's view on the host.
- One template's layer never appears in another template's sandbox or in python3's.
- A hostile root filesystem tarball (../ paths, absolute paths, a link out of the tree and a file
  written through it) extracts nothing outside the new layer and leaves nothing; one with a
  device node, a FIFO and a setuid binary is imported without them (no device, no setuid bit,
  everything root's).
Each ends with box.assert_contained(): host unchanged, server healthy, neighbour unaffected."""
import hashlib
import io
import os
import stat
import tarfile
import tempfile

import pytest

from helpers.daemon import Daemon, finish_or_fail
from helpers.template_store import host_rootfs_paths, write_layer, write_record, write_rootfs_tar
from seclib import PWN, wait_until

pytestmark = pytest.mark.cellbox_only

SITE = "usr/local/lib/python3.11/dist-packages"
LAYERS = {}
# Template zygotes on, so that [zygote] runs this module's template kernels as zygote clones;
# test_template_code_runs_only_in_sandboxes_by_default checks the default, off.
DAEMON_ARGS = ["--template-zygotes=true"]


def PREPARE_DATA_DIR(data_dir):
    """Two templates with files, recorded before the module's daemon starts."""
    LAYERS["sec-a"] = write_layer(data_dir, {f"{SITE}/seca.py": "WHO = 'a'\n",
                                             "opt/seca/tool.txt": "tool a\n",
                                             "app/seca.txt": "app a\n"})
    LAYERS["sec-b"] = write_layer(data_dir, {f"{SITE}/secb.py": "WHO = 'b'\n"})
    write_record(data_dir, "sec-a", [LAYERS["sec-a"]])
    write_record(data_dir, "sec-b", [LAYERS["sec-b"]])


def tree_digest(root):
    """Every path under `root` with its type, mode, owner and content hash."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            digest = ""
            if stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            out[os.path.relpath(path, root)] = (st.st_mode, st.st_uid, digest)
    return out


def layer_dir(box, name):
    return os.path.join(box.daemon.data_dir, "templates", "layers", LAYERS[name])


def view_dir(box, name):
    return os.path.join(box.daemon.data_dir, "templates", "views", name)


ATTACKS = f"""
import errno, os
def attempt(action):
    try:
        action()
        return 'done'
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
targets = ['/{SITE}/seca.py', '/opt/seca/tool.txt', '/app/seca.txt']
_result = {{}}
for t in targets:
    _result[t] = [attempt(lambda: open(t, 'a').write('x')), attempt(lambda: os.unlink(t)),
                  attempt(lambda: os.rename(t, t + '.moved')), attempt(lambda: os.chmod(t, 0o777)),
                  attempt(lambda: open(os.path.dirname(t) + '/{PWN}', 'w').write('x')),
                  attempt(lambda: os.symlink('/etc/passwd', os.path.dirname(t) + '/{PWN}.link'))]
_result['/opt/cellbox'] = [attempt(lambda: open('/opt/cellbox/{PWN}', 'w').write('x'))]
_result['/usr/local/bin'] = [attempt(lambda: open('/usr/local/bin/{PWN}', 'w').write('x'))]
"""


def test_a_sandbox_cannot_change_its_template(box):
    k = box.kernel(name="sec-a")
    layer_before = tree_digest(layer_dir(box, "sec-a"))
    view_before = tree_digest(os.path.join(view_dir(box, "sec-a"), "opt"))
    assert k.json("import seca\n_result = seca.WHO") == "a"
    results = k.json(ATTACKS)
    assert all(outcome in ("EROFS", "EACCES", "EPERM") for outcomes in results.values()
               for outcome in outcomes), results
    assert tree_digest(layer_dir(box, "sec-a")) == layer_before
    assert tree_digest(os.path.join(view_dir(box, "sec-a"), "opt")) == view_before
    assert k.json("import importlib, seca\nimportlib.reload(seca)\n_result = seca.WHO") == "a"
    box.assert_contained()


def test_writes_elsewhere_stay_in_the_sandbox(box):
    writer, other = box.kernel(name="sec-a"), box.kernel(name="sec-a")
    writer.ok(f"""
import os
os.makedirs('/home/user/.local/lib/python3.11/site-packages', exist_ok=True)
open('/home/user/.local/lib/python3.11/site-packages/seca.py', 'w').write("WHO = 'planted'\\n")
open('/home/user/{PWN}', 'w').write('x')
open('/tmp/{PWN}', 'w').write('x')
""")
    seen = other.json(f"""
import os, seca
_result = [seca.WHO, os.path.exists('/home/user/{PWN}'), os.path.exists('/tmp/{PWN}'),
           os.path.exists('/home/user/.local/lib/python3.11/site-packages/seca.py')]""")
    assert seen == ["a", False, False, False]
    for root, dirs, files in os.walk(view_dir(box, "sec-a")):
        assert not any(PWN in name for name in dirs + files), root
    box.assert_contained()


def test_one_templates_layer_is_absent_from_another_and_from_python3(box):
    probe = """
import importlib.util, os
_result = [importlib.util.find_spec('seca') is not None, importlib.util.find_spec('secb') is not None,
           os.path.exists('/opt/seca'), os.path.exists('/app')]"""
    assert box.kernel(name="sec-b").json(probe) == [False, True, False, False]
    assert box.kernel().json(probe) == [False, False, False, False]
    assert box.kernel(name="sec-a").json(probe) == [True, False, True, True]
    box.assert_contained()


def hostile_entry(tar, name, kind=tarfile.REGTYPE, data=b"x", linkname="", mode=0o644,
                  devmajor=0, devminor=0):
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, linkname, mode
    info.devmajor, info.devminor = devmajor, devminor
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def test_a_hostile_tarball_extracts_nothing_outside_the_new_layer(box, tmp_path):
    outside = tempfile.mkdtemp(prefix="cellbox-tar-outside-")
    templates = os.path.join(box.daemon.data_dir, "templates")
    try:
        cases = {
            "dotdot": [("../" * 8 + f"tmp/{PWN}-dotdot", tarfile.REGTYPE, "")],
            "parent": [(f"../{PWN}-parent", tarfile.REGTYPE, "")],
            "absolute": [(f"{outside}/{PWN}-absolute", tarfile.REGTYPE, "")],
            "link-out": [("usr/out", tarfile.SYMTYPE, outside),
                         (f"usr/out/{PWN}-through-link", tarfile.REGTYPE, "")],
            "relative-link-out": [("usr/up", tarfile.SYMTYPE, "../" * 12 + outside.lstrip("/")),
                                  (f"usr/up/{PWN}-through-relative", tarfile.REGTYPE, "")],
            "hardlink-out": [(f"usr/{PWN}-hard", tarfile.LNKTYPE, "/etc/passwd")],
        }
        for case, entries in cases.items():
            path = tmp_path / f"{case}.tar"
            with tarfile.open(path, "w") as tar:
                for name, kind, linkname in entries:
                    hostile_entry(tar, name, kind, linkname=linkname)
            with open(path, "rb") as body:
                r = box.client.post(f"v1/templates/hostile-{case}/import", data=body, timeout=120)
            assert r.status_code == 400, (case, r.status_code, r.text)
            assert os.listdir(outside) == [], case
            assert not any(PWN in name for name in os.listdir(templates)), case
            assert not any(PWN in name for name in os.listdir(os.path.dirname(templates))), case
            assert os.listdir(os.path.join(templates, "staging")) == [], case
            assert not os.path.exists(os.path.join(templates, f"hostile-{case}.json")), case
        with open("/etc/passwd", "rb") as f:
            assert PWN.encode() not in f.read()
    finally:
        for name in os.listdir(outside):
            os.unlink(os.path.join(outside, name))
        os.rmdir(outside)
    box.assert_contained()


def test_devices_fifos_and_setuid_bits_do_not_survive_an_import(box, tmp_path):
    def extra(tar):
        hostile_entry(tar, "usr/local/bin/rootshell", data=b"#!/bin/sh\nid\n", mode=0o6755)
        hostile_entry(tar, "usr/local/kmem", tarfile.CHRTYPE, devmajor=1, devminor=2)
        hostile_entry(tar, "usr/local/disk", tarfile.BLKTYPE, devmajor=8, devminor=0)
        hostile_entry(tar, "usr/local/pipe", tarfile.FIFOTYPE)
        hostile_entry(tar, "usr/local/whiteout", tarfile.CHRTYPE, devmajor=0, devminor=0)
    tar = write_rootfs_tar(str(tmp_path / "root.tar"), host_rootfs_paths(), extra=extra)
    with open(tar, "rb") as body:
        r = box.client.post("v1/templates/sec-imported/import", data=body, timeout=300)
    assert r.status_code == 201, r.text
    try:
        layer = os.path.join(box.daemon.data_dir, "templates", "layers", r.json()["layers"][0])
        for dirpath, dirnames, filenames in os.walk(layer):
            for name in dirnames + filenames:
                st = os.lstat(os.path.join(dirpath, name))
                assert stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode), name
                assert not st.st_mode & (stat.S_ISUID | stat.S_ISGID), name
                assert (st.st_uid, st.st_gid) == (0, 0), name
        shell = os.lstat(os.path.join(layer, "usr/local/bin/rootshell"))
        assert stat.S_IMODE(shell.st_mode) == 0o755
        if box.mode == "zygote":  # its kernels are zygote clones once its zygote is ready
            wait_until(lambda: box.client.get("api").json()["templates"]["sec-imported"]["zygote_ready"],
                       timeout=120, message="sec-imported's zygote")
        k = box.kernel(name="sec-imported")
        assert k.json("""
import os
_result = [os.path.exists(p) for p in ('/usr/local/kmem', '/usr/local/disk', '/usr/local/pipe',
                                       '/usr/local/whiteout')] + [os.stat('/usr/local/bin/rootshell').st_mode & 0o6000]
""") == [False, False, False, False, 0]
        k.delete()
        box.kernels.remove(k)
    finally:
        box.client.delete("v1/templates/sec-imported")
    box.assert_contained()


def test_template_code_runs_only_in_sandboxes_by_default(box, tmp_path):
    """A layer is written by a build step (hostile code): a .pth file in its dist-packages runs
    in every Python that starts with that /usr. By default no zygote of the template's runs it
    as root on the host: its kernels start by exec, and the .pth runs inside each sandbox only."""
    marker = f"/tmp/{PWN}-pth"
    daemon = Daemon(args=["--pool-size", "0"])
    key = write_layer(daemon.data_dir, {
        f"{SITE}/zz-hostile.pth": f"import os; open({marker!r}, 'a').write(str(os.getuid()) + chr(10))\n"})
    write_record(daemon.data_dir, "pth-tpl", [key])
    daemon.start()
    try:
        c = daemon.client()
        k = c.create_kernel(name="pth-tpl")
        with c.ready_ws(k["id"]) as ws:
            inside = ws.execute(f"import os\nprint(os.getuid(), open({marker!r}).read().split())").stdout
        uid, seen = inside.split(" ", 1)
        assert int(uid) >= 200000 and seen.strip() == str([uid])  # ran in the sandbox, as its user
        assert "pth-tpl: its kernels start by exec" in daemon.log_text()
        assert f"kernel {k['id']} started (pth-tpl" in daemon.log_text()
        assert not os.path.exists(marker)  # never on the host
    finally:
        finish_or_fail(daemon)
    box.assert_contained()
