"""Templates with files of their own (model/templates.h, docs/api.md "Templates"): a template's
layers become its sandboxes' read-only /usr/local, /opt and other top-level directories, its
ENV and WORKDIR reach its kernels, and its zygote preloads from its own packages."""
import ast
import hashlib
import os
import stat
import subprocess

import pytest

from helpers.daemon import built
from helpers.template_store import host_rootfs_paths, write_layer, write_record, write_rootfs_tar
from helpers.wait import wait_until

pytestmark = pytest.mark.cellbox_only

SITE = "usr/local/lib/python3.11/dist-packages"


def run(client, kernel_id, code):
    with client.ready_ws(kernel_id) as ws:
        reply = ws.execute(code)
        return ast.literal_eval(reply.result_data()["text/plain"])


def findmnt_under(path):
    out = subprocess.run(["findmnt", "-rn", "-o", "TARGET"], capture_output=True, text=True,
                         timeout=30).stdout.split()
    return [m for m in out if m.startswith(path)]


def test_a_layers_files_are_the_sandbox_s_read_only_usr_local_and_opt(make_daemon):
    d = make_daemon(start=False, args=["--pool-size", "0"])
    key = write_layer(d.data_dir, {f"{SITE}/tplcore_pkg.py": "ANSWER = 42\n",
                                   "opt/tool/data.txt": "from the layer\n"})
    write_record(d.data_dir, "withpkg", [key], env=["TPL_GREETING=hello from ENV"],
                 workdir="/opt/tool", preload="tplcore_pkg")
    d.start()
    c = d.client()
    templates = {t["name"]: t for t in c.get("v1/templates").json()}
    assert templates["withpkg"]["kind"] == "dockerfile" and templates["withpkg"]["layers"] == [key]
    assert templates["python3"]["kind"] == "built-in"
    assert f"{d.data_dir}/templates/views/withpkg/usr" in findmnt_under(d.data_dir)
    # Its zygote runs in the template's view: it preloads the layer's package.
    wait_until(lambda: c.get("api").json()["templates"]["withpkg"]["zygote_ready"], timeout=90,
               message="withpkg's zygote")

    k = c.create_kernel(name="withpkg")
    assert k["name"] == "withpkg"
    assert f"kernel {k['id']} started (withpkg" in d.log_text()
    assert run(c, k["id"], "import sys\n'tplcore_pkg' in sys.modules") is True
    seen = run(c, k["id"], """import os, sys, tplcore_pkg
(tplcore_pkg.ANSWER, tplcore_pkg.__file__, open('/opt/tool/data.txt').read(),
 os.environ.get('TPL_GREETING'), os.getcwd(), os.path.isdir('/opt/cellbox/bin'))""")
    assert seen == (42, f"/{SITE}/tplcore_pkg.py", "from the layer\n", "hello from ENV",
                    "/opt/tool", True)

    # The template is read-only inside: no write to its package, its /opt or a new file there.
    denied = run(c, k["id"], f"""import errno
def attempt(path, mode):
    try:
        open(path, mode).write('x')
        return 'written'
    except OSError as e:
        return errno.errorcode[e.errno]
(attempt('/{SITE}/tplcore_pkg.py', 'a'), attempt('/{SITE}/planted.py', 'w'),
 attempt('/opt/tool/data.txt', 'a'), attempt('/opt/tool/new.txt', 'w'),
 attempt('/usr/local/bin/planted', 'w'))""")
    assert all(result in ("EROFS", "EACCES", "EPERM") for result in denied), denied
    layer_file = os.path.join(d.data_dir, "templates", "layers", key, SITE, "tplcore_pkg.py")
    assert open(layer_file).read() == "ANSWER = 42\n"
    assert not os.path.exists(os.path.join(d.data_dir, "templates", "layers", key, SITE, "planted.py"))

    # python3's sandboxes see nothing of the template.
    base = c.create_kernel()
    assert run(c, base["id"], """import os, importlib.util
(importlib.util.find_spec('tplcore_pkg') is None, os.path.exists('/opt/tool'),
 'TPL_GREETING' in os.environ)""") == (True, False, False)


def test_a_build_step_writes_only_its_layer_which_is_committed_root_owned(tmp_path):
    """templates_layer_begin, templates_mount_build_view, a sandbox with the writable view,
    templates_layer_commit (tests/tools/template_layer_driver.c): pip's and npm's places, /opt,
    /app and the home are the step's; the base's /usr is not; the committed layer's files are
    root's with no setuid bit."""
    driver = built("tests", "template-layer-driver")
    if not os.access(driver, os.X_OK):
        pytest.skip("make build/tests/template-layer-driver first (make integration does)")
    data, workspace = tmp_path / "data", tmp_path / "workspace"
    data.mkdir()
    workspace.mkdir()
    uid = 262000 + os.getpid() % 1000
    os.chown(workspace, uid, uid)
    probe = "/usr/lib/python3.11/os.py"
    before = hashlib.sha256(open(probe, "rb").read()).hexdigest()
    script = f"""set -e
echo 'VALUE = 7' > /{SITE}/drvmod.py
mkdir -p /opt/mytool && echo tool > /opt/mytool/t
echo app > /app/a.txt && chmod 4755 /app/a.txt
echo seed > /home/user/seed.txt
(echo bad > /usr/bin/planted) 2>/dev/null && echo WROTE-USR-BIN || echo usr-bin-refused
(rm -f {probe}) 2>/dev/null && echo REMOVED-BASE || echo base-rm-refused"""
    out = subprocess.run([driver, str(data), "0123456789abcdef", str(uid), str(workspace),
                          built(), script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["usr-bin-refused", "base-rm-refused", "exit", "0", "committed"]
    layer = data / "templates" / "layers" / "0123456789abcdef"
    files = {str(p.relative_to(layer)): p.lstat() for p in layer.rglob("*") if p.is_file()}
    assert sorted(files) == ["app/a.txt", "home/user/seed.txt", "opt/mytool/t",
                             f"{SITE}/drvmod.py"]
    assert all(st.st_uid == 0 and st.st_gid == 0 and not st.st_mode & (stat.S_ISUID | stat.S_ISGID)
               for st in files.values())
    assert not os.path.exists("/usr/bin/planted")
    assert hashlib.sha256(open(probe, "rb").read()).hexdigest() == before
    assert os.listdir(data / "templates" / "staging") == []
    assert findmnt_under(str(data)) == []


@pytest.fixture(scope="module")
def rootfs_paths():
    return host_rootfs_paths()


def import_tar(client, name, tar_path, **query):
    with open(tar_path, "rb") as body:
        return client.post(f"v1/templates/{name}/import", params=query, data=body, timeout=300)


def test_an_imported_root_filesystem_runs_kernels_and_one_lacking_a_piece_is_refused(
        make_daemon, tmp_path, rootfs_paths):
    d = make_daemon(args=["--pool-size", "0"])
    c = d.client()
    templates_dir = os.path.join(d.data_dir, "templates")

    # Each missing piece: a 400 naming it, and nothing left (no record, layer or staging).
    for leave_out, named in ((("usr/bin/python3",), "python3.11"),
                             (("usr/lib/python3/dist-packages/IPython",), "IPython"),
                             (("usr/lib/x86_64-linux-gnu/libc.so",), "C library")):
        tar = write_rootfs_tar(str(tmp_path / "partial.tar"), rootfs_paths, leave_out=leave_out)
        r = import_tar(c, "partial", tar)
        assert r.status_code == 400 and named in r.json()["message"], r.text
        assert not os.path.exists(os.path.join(templates_dir, "partial.json"))
        assert os.listdir(os.path.join(templates_dir, "layers")) == []
        assert os.listdir(os.path.join(templates_dir, "staging")) == []
    assert c.post("v1/templates/partial/import", data=b"not a tarball").status_code == 400

    tar = write_rootfs_tar(str(tmp_path / "root.tar"), rootfs_paths)
    r = import_tar(c, "rooted", tar, preload="json", pool_size=0)
    assert r.status_code == 201, r.text
    model = r.json()
    assert (model["name"], model["kind"], model["from"], model["preload"]) == \
        ("rooted", "rootfs", "rootfs", "json")
    assert model["layers"][0].startswith("root-") and model["size_bytes"] > 10 << 20
    assert c.get("v1/templates/rooted").json()["layers"] == model["layers"]
    r = import_tar(c, "rooted", tar)
    assert r.status_code == 409 and "replace" in r.json()["message"]

    k = c.create_kernel(name="rooted")
    # The kernel runs in the imported tree: IPython is there, the host's numpy is not.
    assert run(c, k["id"], """import importlib.util, sys
(sys.version_info[:2], importlib.util.find_spec('IPython') is not None,
 importlib.util.find_spec('numpy') is None)""") == ((3, 11), True, True)
