"""Templates with files of their own (model/templates.h, docs/api.md "Templates"): a template's
layers become its sandboxes' read-only /usr/local, /opt and other top-level directories, its
ENV and WORKDIR reach its kernels, and its zygote preloads from its own packages."""
import ast
import hashlib
import json
import os
import signal
import stat
import subprocess

import pytest

from helpers.daemon import built
from helpers.wheels import build_wheel, wheel_name
from helpers.v1 import V1
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
    d = make_daemon(start=False, args=["--pool-size", "0", "--template-zygotes=true"])
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

    # /v1's commands of a sandbox of the template get its ENV and see its files too.
    api = V1(d)
    box = api.create(template="withpkg", timeout_s=0)
    ran = api.command(box["id"], "echo $TPL_GREETING; cat /opt/tool/data.txt")
    assert ran.stdout == "hello from ENV\nfrom the layer\n"

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


@pytest.mark.parametrize("template_zygotes", [False, True])
def test_an_imported_root_filesystem_runs_kernels_and_one_lacking_a_piece_is_refused(
        make_daemon, tmp_path, rootfs_paths, template_zygotes):
    d = make_daemon(args=["--pool-size", "0", f"--template-zygotes={str(template_zygotes).lower()}"])
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
    r = import_tar(c, "rooted", tar, preload="tabnanny", pool_size=0)
    assert r.status_code == 201, r.text
    model = r.json()
    assert (model["name"], model["kind"], model["from"], model["preload"]) == \
        ("rooted", "rootfs", "rootfs", "tabnanny")
    assert model["layers"][0].startswith("root-") and model["size_bytes"] > 10 << 20
    assert c.get("v1/templates/rooted").json()["layers"] == model["layers"]
    r = import_tar(c, "rooted", tar)
    assert r.status_code == 409 and "replace" in r.json()["message"]

    if template_zygotes:  # its zygote runs in the imported tree and preloads from it
        wait_until(lambda: c.get("api").json()["templates"]["rooted"]["zygote_ready"], timeout=90,
                   message="rooted's zygote")
    k = c.create_kernel(name="rooted")
    assert run(c, k["id"], "import sys\n'tabnanny' in sys.modules") is template_zygotes
    # The kernel runs in the imported tree: IPython is there, the host's numpy is not.
    assert run(c, k["id"], """import importlib.util, sys
(sys.version_info[:2], importlib.util.find_spec('IPython') is not None,
 importlib.util.find_spec('numpy') is None)""") == ((3, 11), True, True)


def test_a_template_survives_restarts_adopted_sandboxes_keep_it_and_delete_waits_for_them(make_daemon):
    d = make_daemon(start=False, args=["--pool-size", "0", "--keep-sandboxes"])
    key = write_layer(d.data_dir, {f"{SITE}/keptmod.py": "KEPT = 'from the layer'\n",
                                   "home/user/seed/notes.txt": "seeded\n"})
    write_record(d.data_dir, "kept", [key], env=["KEPT_SETTING=on"])
    d.start()
    c = d.client()
    k = c.create_kernel(name="kept")
    seeded = os.path.join(d.workspace(k["id"]), "seed", "notes.txt")
    uid = run(c, k["id"], "import os\nos.getuid()")
    # The home seed is the sandbox's own copy: its user's, writable, the view's file unchanged.
    assert os.stat(seeded).st_uid == uid and open(seeded).read() == "seeded\n"
    assert run(c, k["id"], """open('/home/user/seed/notes.txt', 'a').write('mine\\n')
import keptmod, os
state = 'kept across the restart'
(keptmod.KEPT, os.environ['KEPT_SETTING'], open('/home/user/seed/notes.txt').read())""") == \
        ("from the layer", "on", "seeded\nmine\n")
    view_home = os.path.join(d.data_dir, "templates", "views", "kept", "home", "user")
    assert open(os.path.join(view_home, "seed", "notes.txt")).read() == "seeded\n"

    # Refused while a sandbox uses it, naming that sandbox; python3 and unknown names too.
    r = c.delete("v1/templates/kept")
    assert r.status_code == 409 and k["id"] in r.json()["message"], r.text
    assert c.delete("v1/templates/python3").status_code == 400
    assert c.delete("v1/templates/nosuch").status_code == 404
    assert c.get("v1/templates/kept").json()["sandboxes"] == [k["id"]]

    # A restart that leaves the sandboxes: the template is back, its sandbox adopted.
    d.stopped_by_us = True
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=30) == 0
    d2 = make_daemon(start=False, args=["--pool-size", "0"])
    d2.data_dir = d.data_dir
    d2.start()
    c2 = d2.client()
    assert "kept" in [t["name"] for t in c2.get("v1/templates").json()]
    assert run(c2, k["id"], "state, keptmod.KEPT") == ("kept across the restart", "from the layer")
    fresh = c2.create_kernel(name="kept")
    assert run(c2, fresh["id"], "import keptmod\nkeptmod.KEPT") == "from the layer"
    for kernel_id in (k["id"], fresh["id"]):
        c2.delete_kernel(kernel_id)

    r = c2.delete("v1/templates/kept")
    assert r.status_code == 204, r.text
    assert c2.get("v1/templates/kept").status_code == 404
    templates_dir = os.path.join(d.data_dir, "templates")
    assert findmnt_under(templates_dir) == []
    assert not os.path.exists(os.path.join(templates_dir, "kept.json"))
    assert os.listdir(os.path.join(templates_dir, "layers")) == []
    assert os.listdir(os.path.join(templates_dir, "views")) == []
    assert c2.post("api/kernels", json={"name": "kept"}).status_code == 404
    assert d2.finish() is None  # before the first daemon's teardown, which shares its data dir


def test_pip_install_in_a_template_sandbox_goes_to_its_own_workspace_never_the_template(make_daemon):
    d = make_daemon(start=False, args=["--pool-size", "0"])
    key = write_layer(d.data_dir, {f"{SITE}/basepkg.py": "X = 1\n"})
    write_record(d.data_dir, "piptpl", [key])
    d.start()
    c = d.client()
    view_site = os.path.join(d.data_dir, "templates", "views", "piptpl", SITE)
    layer_site = os.path.join(d.data_dir, "templates", "layers", key, SITE)
    view_before = sorted(os.listdir(view_site))
    assert "basepkg.py" in view_before
    k = c.create_kernel(name="piptpl")
    wheel = build_wheel("tplwheel", "1.0", "installed in the sandbox", "tplwheel-hello")
    installed = run(c, k["id"], f"""import subprocess, sys
open('/tmp/{wheel_name('tplwheel', '1.0')}', 'wb').write({wheel!r})
done = subprocess.run([sys.executable, '-m', 'pip', 'install', '--no-index', '--no-deps',
                       '/tmp/{wheel_name('tplwheel', '1.0')}'], capture_output=True, text=True)
import importlib, site
importlib.invalidate_caches()
import tplwheel
(done.returncode, tplwheel.__file__)""")
    assert installed == (0, "/home/user/.local/lib/python3.11/site-packages/tplwheel/__init__.py")
    assert os.path.exists(os.path.join(d.workspace(k["id"]), ".local/lib/python3.11/site-packages/tplwheel"))
    assert sorted(os.listdir(view_site)) == view_before
    assert sorted(os.listdir(layer_site)) == ["basepkg.py"]
    other = c.create_kernel(name="piptpl")
    assert run(c, other["id"], "import importlib.util\nimportlib.util.find_spec('tplwheel') is None") is True


def cli(d, *args):
    return subprocess.run([built("bin", "cellbox"), *args], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, CELLBOX_URL=f"http://127.0.0.1:{d.port}",
                                                CELLBOX_TOKEN=d.token))


def test_the_cli_lists_shows_imports_and_deletes_templates(make_daemon, tmp_path, rootfs_paths):
    d = make_daemon(start=False, args=["--pool-size", "0"])
    key = write_layer(d.data_dir, {f"{SITE}/clipkg-2.1.dist-info/METADATA": "Name: clipkg\n",
                                   f"{SITE}/clipkg/__init__.py": ""})
    write_record(d.data_dir, "clitpl", [key], preload="clipkg")
    d.start()
    listed = cli(d, "templates")
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]}
    assert rows["clitpl"][1:4] == ["dockerfile", "cellbox", "13B"]
    assert rows["clitpl"][-3:] == ["clipkg==2.1", "clipkg", "0"]
    shown = cli(d, "template", "show", "clitpl")
    assert shown.returncode == 0 and json.loads(shown.stdout)["packages"] == ["clipkg==2.1"]

    tar = write_rootfs_tar(str(tmp_path / "root.tar"), rootfs_paths)
    imported = cli(d, "template", "import", "fromtar", tar, "--pool-size", "0")
    assert imported.returncode == 0 and imported.stdout.strip() == "fromtar", imported.stderr
    assert json.loads(cli(d, "template", "show", "fromtar").stdout)["kind"] == "rootfs"
    refused = cli(d, "template", "delete", "python3")
    assert refused.returncode != 0 and "built in" in refused.stderr
    removed = cli(d, "template", "delete", "clitpl", "fromtar")
    assert removed.returncode == 0 and removed.stdout.split() == ["removed", "clitpl", "removed", "fromtar"]
    missing = cli(d, "template", "show", "clitpl")
    assert missing.returncode != 0 and "does not exist" in missing.stderr
