"""Templates (--templates): kernelspecs beside python3, each with its own zygote (its own preload
list) and its own warm pool; kernels of every template are sandboxed alike (docs/api.md)."""
import ast
import os
import re
import signal
import subprocess
import tempfile

import pytest

from helpers.daemon import run_daemon_to_exit
from helpers.wait import wait_until

pytestmark = pytest.mark.cellbox_only

TEMPLATES = "light::1;data:numpy:0"
PRELOADED = ("import sys\nsorted(m for m in ('IPython', 'numpy', 'pandas', 'matplotlib')"
             " if m in sys.modules)")
# What every sandboxed kernel is: the sandbox's user, seccomp and no_new_privs, cellbox-init as pid 1.
SANDBOXED = """import os
status = dict(line.split(':', 1) for line in open('/proc/self/status'))
(os.getuid() >= 200000, status['Seccomp'].strip(), status['NoNewPrivs'].strip(),
 open('/proc/1/comm').read().strip())"""


def template_state(client, name):
    return client.get("api").json()["templates"][name]


def run(client, kernel_id, code):
    with client.ready_ws(kernel_id) as ws:
        return ast.literal_eval(ws.execute(code).result_data()["text/plain"])


def test_each_template_is_a_kernelspec_with_its_own_zygote_and_pool(make_daemon):
    d = make_daemon(args=["--pool-size", "0", "--templates", TEMPLATES])
    c = d.client()
    wait_until(lambda: all(template_state(c, name)["zygote_ready"] for name in ("python3", "light", "data"))
               and template_state(c, "light")["warm_pool_ready"] == 1, timeout=90,
               message="the three zygotes and light's pool")
    assert "zygote of light ready" in d.log_text() and "zygote of data ready" in d.log_text()

    specs = c.get("api/kernelspecs").json()
    assert specs["default"] == "python3"
    # the templates are the Python kernelspecs (the other languages' are listed too: issue 23)
    assert sorted(name for name, model in specs["kernelspecs"].items()
                  if model["spec"]["language"] == "python") == ["data", "light", "python3"]
    light = specs["kernelspecs"]["light"]["spec"]
    assert light["display_name"] == "Python 3 (cellbox, light)" and light["language"] == "python"
    assert light["metadata"]["cellbox_preload"] == "" and light["metadata"]["cellbox_pool_size"] == 1
    assert specs["kernelspecs"]["data"]["spec"]["metadata"]["cellbox_preload"] == "numpy"
    logo = c.get("kernelspecs/light/logo-64x64.png")
    assert logo.status_code == 200 and logo.content.startswith(b"\x89PNG")
    assert template_state(c, "python3")["warm_pool"] == 0 and template_state(c, "data")["warm_pool"] == 0

    # Each kernel starts with what its own zygote imported, nothing of the others'.
    light_kernel = c.create_kernel(name="light")
    assert light_kernel["name"] == "light"
    assert f"kernel {light_kernel['id']} taken from the warm pool (light" in d.log_text()
    assert run(c, light_kernel["id"], PRELOADED) == ["IPython"]
    assert run(c, light_kernel["id"], SANDBOXED) == (True, "2", "1", "cellbox-init")
    data_kernel = c.create_kernel(name="data")
    assert f"kernel {data_kernel['id']} started (data" in d.log_text()
    assert run(c, data_kernel["id"], PRELOADED) == ["IPython", "numpy"]
    assert run(c, data_kernel["id"], SANDBOXED) == (True, "2", "1", "cellbox-init")
    default_kernel = c.create_kernel()
    assert default_kernel["name"] == "python3"
    assert run(c, default_kernel["id"], PRELOADED) == ["IPython", "matplotlib", "numpy", "pandas"]
    # light's pool hands out only light kernels, and fills again.
    wait_until(lambda: template_state(c, "light")["warm_pool_ready"] == 1, timeout=60, message="light's pool")

    # The native API's templates are the same, and the command-line client lists them.
    templates = {t["name"]: t for t in c.get("v1/templates").json()}
    assert sorted(templates) == ["data", "light", "python3"]
    assert templates["python3"]["default"] and not templates["light"]["default"]
    assert (templates["light"]["preload"], templates["light"]["pool_size"]) == ("", 1)
    assert (templates["data"]["preload"], templates["data"]["pool_size"]) == ("numpy", 0)
    listed = subprocess.run([os.path.join(os.path.dirname(d.binary), "cellbox"), "templates"], capture_output=True,
                            text=True, timeout=30, env=dict(os.environ, CELLBOX_URL=f"http://127.0.0.1:{d.port}",
                                                            CELLBOX_TOKEN=d.token))
    assert listed.returncode == 0, listed.stderr
    assert [line.split() for line in listed.stdout.splitlines()[1:]] == [
        ["python3", "yes", "built-in", "cellbox", "-", "-", "-", "numpy,pandas,matplotlib,IPython", "0"],
        ["light", "modules", "cellbox", "-", "-", "-", "-", "1"],
        ["data", "modules", "cellbox", "-", "-", "-", "numpy", "0"]]
    box = c.post("v1/sandboxes", json={"template": "light"})
    assert box.status_code == 201 and box.json()["template"] == "light", box.text
    assert c.delete(f"v1/sandboxes/{box.json()['id']}").status_code == 204


def test_a_templates_zygote_that_dies_comes_back_alone(make_daemon):
    """Each template's zygote is on its own: killed, its kernels start by exec meanwhile, it
    comes back, and the other templates' zygotes go on untouched."""
    d = make_daemon(args=["--pool-size", "0", "--templates", "light::0"])
    c = d.client()
    wait_until(lambda: all(template_state(c, name)["zygote_ready"] for name in ("python3", "light")),
               timeout=90, message="both zygotes")
    light_zygote = int(re.search(r"zygote of light ready \(pid (\d+)", d.log_text()).group(1))
    default_zygote = int(re.search(r"zygote ready \(pid (\d+)", d.log_text()).group(1))
    os.kill(light_zygote, signal.SIGKILL)
    wait_until(lambda: not template_state(c, "light")["zygote_ready"], timeout=30, message="light's zygote gone")
    assert template_state(c, "python3")["zygote_ready"]
    k = c.create_kernel(name="light")  # by exec, or by the zygote if it is back already
    assert run(c, k["id"], "6 * 7") == 42
    wait_until(lambda: d.log_text().count("zygote of light ready") == 2, timeout=90,
               message="light's zygote to come back")
    assert d.log_text().count("zygote ready") == 1 and os.path.exists(f"/proc/{default_zygote}")
    assert run(c, c.create_kernel(name="light")["id"], PRELOADED) == ["IPython"]
    assert run(c, c.create_kernel()["id"], PRELOADED) == ["IPython", "matplotlib", "numpy", "pandas"]


def test_a_template_can_be_the_default_kernel(make_daemon):
    d = make_daemon(args=["--pool-size", "0", "--templates", "light::0", "--default-kernel", "light"])
    c = d.client()
    assert c.get("api/kernelspecs").json()["default"] == "light"
    k = c.create_kernel()
    assert k["name"] == "light"
    wait_until(lambda: template_state(c, "light")["zygote_ready"], timeout=90, message="light's zygote")
    assert run(c, c.create_kernel()["id"], PRELOADED) == ["IPython"]


def test_a_template_whose_module_is_missing_still_starts_kernels(make_daemon):
    d = make_daemon(args=["--pool-size", "0", "--templates", "ghost:json,no_such_module_xyz:0"])
    c = d.client()
    wait_until(lambda: template_state(c, "ghost")["zygote_ready"], timeout=90, message="ghost's zygote")
    assert "zygote of ghost: could not preload no_such_module_xyz" in d.log_text()
    k = c.create_kernel(name="ghost")
    assert run(c, k["id"], "import json, sys\n'json' in sys.modules") is True


@pytest.mark.parametrize("templates,words", [
    ("light", "has no ':'"),
    ("bad name::1", "is not a template name"),
    ("-light::1", "is not a template name"),
    ("python3::1", "defined twice"),
    ("light::0;light:numpy:0", "defined twice"),
    ("light:num-py:0", "not a list of module names"),
    ("light:numpy,,pandas:0", "not a list of module names"),
    ("light::-1", "pool size"),
    ("light::many", "pool size"),
    (";".join(f"t{i}::0" for i in range(64)), "at most 64 templates"),
])
def test_bad_templates_stop_the_daemon_with_a_message(templates, words):
    with tempfile.TemporaryDirectory(prefix="cellbox-test-") as tmp:
        r = run_daemon_to_exit(["--ip", "127.0.0.1", "--data-dir", tmp, "--token", "t", "--templates", templates])
    assert r.returncode != 0
    assert "--templates" in r.stderr and words in r.stderr, r.stderr


def test_an_unknown_template_is_404(make_daemon):
    c = make_daemon(args=["--pool-size", "0", "--templates", "light::0"]).client()
    r = c.post("api/kernels", json={"name": "heavy"})
    assert r.status_code == 404 and "heavy" in r.json()["message"]
    r = c.post("v1/sandboxes", json={"template": "heavy"})
    assert r.status_code == 404 and "heavy" in r.json()["message"]
