"""A template through every client library a user already has (tests/clients/node/
templates_clients.mjs), unchanged, against cellboxd:

- E2B's SDK: Template.exists(name) and aliasExists(name) are true for the template and false for
  a name no template has (GET /templates/aliases/{alias}: 200 with E2B's alias model, 404);
  Sandbox.create(name) makes a sandbox of it (getInfo names it) whose runCode imports its module;
- MCP's SDK: list_templates names it (text and structuredContent), create_sandbox {template}
  makes a sandbox of it whose run_code imports its module, an unknown template is a tool error;
  both tools' descriptions say how a template is built;
- JupyterLab's client (the Kernel Gateway API): the template is a kernelspec whose metadata says
  cellbox_kind, cellbox_from and cellbox_packages, and a kernel of it imports its module.

Each case's module is one python3's sandboxes do not have imported (checked beside it on /v1),
preloaded by the template's zygote, so every client shows a sandbox of the template: the module
already imported when the first cell runs, from the template's files.

- "modules": a template of --templates (NAME:MODULES[:POOL]) preloading a standard-library
  module numpy, pandas, matplotlib and IPython never import;
- "dockerfile": a template built with POST /v1/templates from `RUN pip install cellbox-nettest`
  off the tests' own package index (helpers/test_internet.py, 203.0.113.20; the build's network
  allows that address alone) and `ENV`, on a daemon with --allow-network and --template-zygotes
  (so a zygote in the template's view preloads the package); afterwards it is deleted, and
  neither E2B's Template.exists route nor /api/kernelspecs finds it.
"""
import contextlib
import json

import pytest
import requests

from helpers.daemon import Daemon, finish_or_fail
from helpers.network_ranges import sandbox_range
from helpers.node_clients import assert_every_step_passed, passed_step, run_e2b_script
from helpers.test_internet import INDEX_ADDRESS, small_internet
from helpers.v1 import V1
from helpers.wait import wait_until

pytestmark = pytest.mark.cellbox_only  # Jupyter Server has no E2B API, MCP or templates

TIMEOUT = 300
BUILD_TIMEOUT = 240


class Case:
    def __init__(self, name, template, module, module_file, **expected):
        self.name, self.template, self.module, self.module_file = name, template, module, module_file
        self.daemon = None
        self.expected = expected  # what the kernelspec metadata and list_templates say

    @property
    def imported(self):
        """What the import cell prints in a sandbox of the template: preloaded, and from where."""
        return f"(True, {self.module_file!r})"


def zygote_ready(daemon, template):
    """Whether the template's zygote has preloaded its list (GET /api): until then its kernels
    start by exec, importing nothing ahead."""
    return daemon.client().get("api").json()["templates"].get(template, {}).get("zygote_ready")


def modules_case():
    made = Case("modules", "surf-wave", "wave", "/usr/lib/python3.11/wave.py", kind="modules",
                preload="wave", packages=[])
    made.daemon = Daemon(args=["--templates", "surf-wave:wave:0"]).start()
    return made


DOCKERFILE = """FROM e2bdev/code-interpreter:latest
# the walkthrough's step, from the tests' own index
RUN pip install --index-url {index_url} --trusted-host {index} {project}
ENV SURF_TEMPLATE=built
WORKDIR /home/user/project
"""


def build_template(daemon, name, dockerfile, preload):
    r = daemon.client().post("v1/templates", json={
        "name": name, "dockerfile": dockerfile, "preload": preload, "pool_size": 0,
        "network": {"allowOut": [INDEX_ADDRESS], "denyOut": ["0.0.0.0/0"]}}, timeout=BUILD_TIMEOUT)
    assert r.status_code == 200, r.text
    lines = [json.loads(line) for line in r.text.splitlines() if line.strip()]
    assert lines and lines[-1]["type"] == "done", lines
    return lines[-1]["template"]


def dockerfile_case(internet):
    module = internet.wheel_package
    made = Case("dockerfile", "surf-nettest", module,
                f"/usr/local/lib/python3.11/dist-packages/{module}/__init__.py", kind="dockerfile",
                preload=module)
    # --template-zygotes: the template's kernels are clones of a zygote that preloaded its package
    made.daemon = Daemon(args=["--allow-network", "--network-range", sandbox_range(3),
                               "--template-zygotes"]).start()
    try:
        dockerfile = DOCKERFILE.format(index_url=internet.index_url, index=INDEX_ADDRESS,
                                       project=internet.wheel_project)
        model = build_template(made.daemon, made.template, dockerfile, module)
        assert model["kind"] == "dockerfile", model
        made.expected["packages"] = model["packages"]
    except BaseException:
        finish_or_fail(made.daemon)
        raise
    return made


@pytest.fixture(scope="module", params=["modules", "dockerfile"])
def case(request):
    with small_internet(big_file_bytes=1024 * 1024) if request.param == "dockerfile" \
            else contextlib.nullcontext() as internet:
        made = modules_case() if request.param == "modules" else dockerfile_case(internet)
        try:
            wait_until(lambda: zygote_ready(made.daemon, made.template), timeout=120,
                       message=f"{made.template}'s zygote")
            yield made
        finally:
            finish_or_fail(made.daemon)


@pytest.fixture(scope="module")
def sdk_run(case):
    return run_e2b_script(case.daemon, "templates_clients.mjs", TIMEOUT,
                          env={"CELLBOX_TEMPLATE": case.template, "CELLBOX_MODULE": case.module,
                               # the built template's ENV and WORKDIR, which E2B's SDK must see
                               **({"CELLBOX_TEMPLATE_ENV": "SURF_TEMPLATE=built",
                                   "CELLBOX_TEMPLATE_WORKDIR": "/home/user/project"}
                                  if case.name == "dockerfile" else {})})


def test_every_step_reported_and_passed(sdk_run):
    proc, steps, detail = sdk_run
    assert_every_step_passed(proc, steps, detail, [
        "e2b_template_exists", "e2b_template_missing", "e2b_create_and_import", "mcp_connect",
        "mcp_tools_describe_templates", "mcp_list_templates", "mcp_create_and_import", "mcp_unknown_template",
        "jupyter_kernelspec", "jupyter_kernel_import"])


def test_python3_sandboxes_do_not_have_the_module(case):
    """What makes the clients' checks mean something: python3's kernels lack it until imported."""
    v1 = V1(case.daemon)
    try:
        sandbox = v1.create(template="python3")
        events = v1.execute(sandbox["id"], f"import sys\nprint({case.module!r} in sys.modules)")
        assert events.stdout == "False\n", events
    finally:
        v1.cleanup()


def test_e2b_template_exists_and_a_missing_one_does_not(sdk_run):
    _, steps, detail = sdk_run
    got = passed_step(steps, detail, "e2b_template_exists")
    assert got["exists"] is True and got["alias_exists"] is True, detail
    assert passed_step(steps, detail, "e2b_template_missing")["exists"] is False, detail


def test_e2b_alias_route_answers_e2bs_model_or_404(case):
    client, key = case.daemon.client(), {"X-API-Key": case.daemon.token}
    r = client.get("templates/aliases/" + case.template, headers=key)
    assert r.status_code == 200 and r.json() == {"templateID": case.template, "public": False}, r.text
    r = client.get("templates/aliases/no-such-template", headers=key)
    assert r.status_code == 404, r.text
    assert "no-such-template" in r.json()["message"] and "POST /v1/templates" in r.json()["message"]
    # like the rest of E2B's control plane, only the daemon's token opens it
    assert requests.get(f"{case.daemon.origin}/templates/aliases/{case.template}", timeout=30).status_code == 401


def test_e2b_create_of_a_missing_template_says_how_to_get_one(case):
    r = case.daemon.client().post("sandboxes", json={"templateID": "no-such-template"},
                                  headers={"X-API-Key": case.daemon.token})
    assert r.status_code == 404 and r.json()["code"] == 404, r.text
    message = r.json()["message"]
    assert "no-such-template" in message and "GET /v1/templates" in message, message
    assert "POST /v1/templates" in message and "cellbox template build" in message, message


def test_e2b_sandbox_of_the_template_imports_its_module(sdk_run, case):
    _, steps, detail = sdk_run
    got = passed_step(steps, detail, "e2b_create_and_import")
    assert got["template_id"] == case.template and got["printed"] == case.imported, detail


def test_mcp_lists_the_template_and_makes_sandboxes_of_it(sdk_run, case):
    _, steps, detail = sdk_run
    listed = passed_step(steps, detail, "mcp_list_templates")
    assert listed["listed"]["kind"] == case.expected["kind"], detail
    assert listed["listed"]["preload"] == case.expected["preload"], detail
    assert listed["listed"]["packages"] == case.expected["packages"], detail
    assert f"preloads: {case.expected['preload']}" in listed["line"], detail
    created = passed_step(steps, detail, "mcp_create_and_import")
    assert f"from template {case.template} " in created["created"], detail
    assert created["printed"] == case.imported, detail
    unknown = passed_step(steps, detail, "mcp_unknown_template")["text"]
    assert "no-such-template" in unknown and "list_templates" in unknown, detail


def test_kernel_gateway_kernelspec_of_the_template(sdk_run, case):
    _, steps, detail = sdk_run
    spec = passed_step(steps, detail, "jupyter_kernelspec")
    assert {"python3", case.template} <= set(spec["names"]), detail
    metadata = spec["metadata"]
    assert metadata["cellbox_kind"] == case.expected["kind"], detail
    assert metadata["cellbox_packages"] == case.expected["packages"], detail
    assert "cellbox_from" in metadata and metadata["cellbox_preload"] == case.expected["preload"]
    assert passed_step(steps, detail, "jupyter_kernel_import")["printed"] == case.imported, detail


def test_a_built_template_names_its_package_and_is_deleted(sdk_run, case):
    """The built template's packages name the wheel its RUN installed; once deleted (204) no
    client finds it: E2B's Template.exists route answers 404, /api/kernelspecs lacks it."""
    if case.name != "dockerfile":
        pytest.skip("only a template with files is built and deleted")
    assert any(p.lower().replace("_", "-").startswith("cellbox-nettest==")
               for p in case.expected["packages"]), case.expected
    client = case.daemon.client()
    r = client.delete(f"v1/templates/{case.template}")
    assert r.status_code == 204, r.text
    assert client.get("templates/aliases/" + case.template,
                      headers={"X-API-Key": case.daemon.token}).status_code == 404
    assert case.template not in client.get("api/kernelspecs").json()["kernelspecs"]
