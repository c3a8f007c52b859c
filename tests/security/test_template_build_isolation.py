"""A template build's RUN is as contained as a cell (model/template_build.h): it runs as a
sandbox user in a build sandbox, with a networked sandbox's firewall, over a view where only its
new layer is writable. A hostile Dockerfile tries, from a RUN: to read the host's /etc/shadow, the
daemon's data directory and another template's layer by host path; to write the base /usr
(/usr/bin/python3) and /usr/lib/python3/dist-packages; to reach the daemon's port on the host's
loopback and on the gateway; to make a device node; and to leave a setuid program and a symlink
to /etc/shadow in its layer. Each attempt must fail or be neutralised, and the host's files and
another template's layer stay byte for byte the same.

Network: the sandboxes' own range only (helpers/network_ranges.py); no outside host is used."""
import hashlib
import json
import os
import stat

import pytest

from helpers.daemon import Daemon, serve
from helpers.network_ranges import gateway_of_range, unrouted_range
from helpers.template_build import post_build
from helpers.v1 import V1

pytestmark = pytest.mark.cellbox_only

PROBE = r'''
import json, os, socket, sys
data_dir, other_layer, port, gateway = sys.argv[1:5]
results = {}
def attempt(name, action):
    try:
        results[name] = "done: " + repr(action())[:80]
    except Exception as error:
        results[name] = "refused: " + type(error).__name__
attempt("read_shadow", lambda: open("/etc/shadow").read())
attempt("read_data_dir", lambda: os.listdir(data_dir))
attempt("read_uid_block", lambda: open(os.path.join(data_dir, "uid-block")).read())
attempt("list_other_layer", lambda: os.listdir(other_layer))
attempt("write_python3", lambda: open("/usr/bin/python3", "ab").write(b"x"))
attempt("write_dist_packages", lambda: open("/usr/lib/python3/dist-packages/evil_tpl.py", "w").write("x"))
attempt("mknod", lambda: os.mknod("/usr/local/share/null2", 0o600 | 0o020000, os.makedev(1, 3)))
def connect(host):
    s = socket.create_connection((host, int(port)), timeout=3)
    s.close()
    return "connected"
attempt("daemon_on_loopback", lambda: connect("127.0.0.1"))
attempt("daemon_on_gateway", lambda: connect(gateway))
def setuid_program():
    path = "/usr/local/bin/tpl-suid"
    with open(path, "w") as f:
        f.write("#!/bin/sh\nid\n")
    os.chmod(path, 0o6755)
    return oct(os.stat(path).st_mode)
attempt("setuid_program", setuid_program)
attempt("home_symlink", lambda: os.symlink("/etc/shadow", "/home/user/shadow-link"))
print("PROBE " + json.dumps(results), flush=True)
'''


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.fixture(scope="module")
def daemon():
    network_range = str(unrouted_range())
    d = Daemon(args=["--allow-network", "--network-range", network_range, "--pool-size", "0"])
    d.gateway = gateway_of_range(network_range)
    yield from serve(d.start())


@pytest.fixture(scope="module")
def other_template(daemon):
    build = post_build(daemon, "neighbour", "FROM cellbox\nCOPY secret.txt /opt/neighbour/\n",
                       context={"secret.txt": "the neighbour's file\n"})
    assert build.last["type"] == "done", build
    key = build.last["template"]["layers"][-1]
    layer = os.path.join(daemon.data_dir, "templates", "layers", key)
    yield layer
    daemon.client().delete("v1/templates/neighbour", timeout=60)


def probe_results(build):
    for line in build.output().splitlines():
        if line.startswith("PROBE "):
            return json.loads(line[len("PROBE "):])
    raise AssertionError(f"the probe printed nothing: {build}")


def test_a_hostile_run_is_contained_and_its_layer_is_neutralised(daemon, other_template):
    watched = ["/usr/bin/python3", os.path.join(other_template, "opt", "neighbour", "secret.txt")]
    before = {path: sha256(path) for path in watched}
    with open("/etc/shadow") as f:
        host_shadow = f.read()
    dockerfile = (f"FROM cellbox\nCOPY probe.py /opt/probe/probe.py\n"
                  f"RUN python3 /opt/probe/probe.py {daemon.data_dir} {other_template} "
                  f"{daemon.port} {daemon.gateway}\n")
    build = post_build(daemon, "hostile", dockerfile, context={"probe.py": PROBE})
    assert build.last["type"] == "done", build
    seen = probe_results(build)
    for attack in ("read_data_dir", "read_uid_block", "list_other_layer", "write_python3",
                   "write_dist_packages", "mknod", "daemon_on_loopback", "daemon_on_gateway"):
        assert seen[attack].startswith("refused"), (attack, seen[attack])
    assert seen["read_shadow"].startswith("refused") or host_shadow[:40] not in seen["read_shadow"]

    # The host and the neighbour are untouched.
    assert {path: sha256(path) for path in watched} == before
    assert not os.path.exists("/usr/lib/python3/dist-packages/evil_tpl.py")

    # What the step left in its layer is root's, with no setuid bit and no device.
    layer = os.path.join(daemon.data_dir, "templates", "layers",
                         build.last["template"]["layers"][-1])
    program = os.lstat(os.path.join(layer, "usr", "local", "bin", "tpl-suid"))
    assert program.st_uid == 0 and program.st_gid == 0
    assert not program.st_mode & (stat.S_ISUID | stat.S_ISGID)
    for root, dirs, files in os.walk(layer):
        for name in dirs + files:
            st = os.lstat(os.path.join(root, name))
            assert st.st_uid == 0, os.path.join(root, name)
            if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                assert stat.S_ISCHR(st.st_mode) and st.st_rdev == 0, os.path.join(root, name)
    assert os.path.islink(os.path.join(layer, "home", "user", "shadow-link"))

    # A sandbox of the template: its home seed never brought the host's /etc/shadow along.
    c = daemon.client()
    v1 = V1(daemon)
    sid = v1.create(template="hostile")["id"]
    try:
        inside = eval(v1.value(sid, """import os
link = '/home/user/shadow-link'
try:
    text = open(link).read()
except Exception as error:
    text = 'refused: ' + type(error).__name__
(os.path.islink(link) or not os.path.exists(link), text[:200])"""))
        assert inside[0], inside
        assert host_shadow[:40] not in inside[1]
        workspace = os.path.join(daemon.data_dir, "workspaces", sid)
        for root, _dirs, files in os.walk(workspace):
            for name in files:
                path = os.path.join(root, name)
                if os.path.isfile(path) and not os.path.islink(path):
                    with open(path, "rb") as f:
                        assert host_shadow[:40].encode() not in f.read(), path
    finally:
        v1.remove(sid)
        v1.cleanup()
    assert c.delete("v1/templates/hostile", timeout=60).status_code == 204
    assert {path: sha256(path) for path in watched} == before
