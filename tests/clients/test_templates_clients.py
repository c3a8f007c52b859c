"""A template through every client library a user already has (tests/clients/node/
templates_clients.mjs), unchanged, against cellboxd:

- E2B's SDK: Template.exists(name) and aliasExists(name) are true for the template and false for
  a name no template has (GET /templates/aliases/{alias}: 200 with E2B's alias model, 404);
  Sandbox.create(name) makes a sandbox of it (getInfo names it) whose runCode imports its module;
- MCP's SDK: list_templates names it (text and structuredContent), create_sandbox {template}
  makes a sandbox of it whose run_code imports its module, an unknown template is a tool error;
- JupyterLab's client (the Kernel Gateway API): the template is a kernelspec whose metadata says
  cellbox_kind, cellbox_from and cellbox_packages, and a kernel of it imports its module.

The template is one of --templates (NAME:MODULES[:POOL]) preloading a standard-library module
that python3's sandboxes never import, so each client shows a sandbox of the template (the
module already imported when the first cell runs) and not of python3 (checked beside it on /v1).
"""
import pytest

from helpers.daemon import Daemon, finish_or_fail
from helpers.node_clients import assert_every_step_passed, passed_step, run_e2b_script
from helpers.v1 import V1
from helpers.wait import wait_until

pytestmark = pytest.mark.cellbox_only  # Jupyter Server has no E2B API, MCP or templates

TIMEOUT = 300
TEMPLATE = "surf-wave"
MODULE = "wave"  # the standard library's; numpy, pandas, matplotlib and IPython never import it
IMPORTED = f"(True, '/usr/lib/python3.11/{MODULE}.py')"  # preloaded by the template's zygote


def zygote_ready(daemon, template):
    """Whether the template's zygote has preloaded its list (GET /api): until then its kernels
    start by exec, importing nothing ahead."""
    return daemon.client().get("api").json()["templates"][template]["zygote_ready"]


@pytest.fixture(scope="module")
def daemon():
    d = Daemon(args=["--templates", f"{TEMPLATE}:{MODULE}:0"]).start()
    try:
        wait_until(lambda: zygote_ready(d, TEMPLATE), timeout=120, message=f"{TEMPLATE}'s zygote")
        yield d
    finally:
        finish_or_fail(d)


@pytest.fixture(scope="module")
def sdk_run(daemon):
    return run_e2b_script(daemon, "templates_clients.mjs", TIMEOUT,
                          env={"CELLBOX_TEMPLATE": TEMPLATE, "CELLBOX_MODULE": MODULE})


def test_every_step_reported_and_passed(sdk_run):
    proc, steps, detail = sdk_run
    assert_every_step_passed(proc, steps, detail, [
        "e2b_template_exists", "e2b_template_missing", "e2b_create_and_import", "mcp_connect",
        "mcp_list_templates", "mcp_create_and_import", "mcp_unknown_template",
        "jupyter_kernelspec", "jupyter_kernel_import"])


def test_python3_sandboxes_do_not_have_the_module(daemon):
    """What makes the clients' checks mean something: python3's kernels lack it until imported."""
    v1 = V1(daemon)
    try:
        sandbox = v1.create(template="python3")
        events = v1.execute(sandbox["id"], f"import sys\nprint({MODULE!r} in sys.modules)")
        assert events.stdout == "False\n", events
    finally:
        v1.cleanup()


def test_e2b_template_exists_and_a_missing_one_does_not(sdk_run):
    _, steps, detail = sdk_run
    got = passed_step(steps, detail, "e2b_template_exists")
    assert got["exists"] is True and got["alias_exists"] is True, detail
    assert passed_step(steps, detail, "e2b_template_missing")["exists"] is False, detail


def test_e2b_alias_route_answers_e2bs_model_or_404(daemon):
    r = daemon.client().get("templates/aliases/" + TEMPLATE, headers={"X-API-Key": daemon.token})
    assert r.status_code == 200 and r.json() == {"templateID": TEMPLATE, "public": False}, r.text
    r = daemon.client().get("templates/aliases/no-such-template", headers={"X-API-Key": daemon.token})
    assert r.status_code == 404, r.text
    assert "no-such-template" in r.json()["message"] and "POST /v1/templates" in r.json()["message"]


def test_e2b_sandbox_of_the_template_imports_its_module(sdk_run):
    _, steps, detail = sdk_run
    got = passed_step(steps, detail, "e2b_create_and_import")
    assert got["template_id"] == TEMPLATE and got["printed"] == IMPORTED, detail


def test_mcp_lists_the_template_and_makes_sandboxes_of_it(sdk_run):
    _, steps, detail = sdk_run
    listed = passed_step(steps, detail, "mcp_list_templates")
    assert listed["listed"]["kind"] == "modules" and listed["listed"]["preload"] == MODULE, detail
    assert listed["listed"]["packages"] == [] and "preloads: wave" in listed["line"], detail
    assert passed_step(steps, detail, "mcp_create_and_import")["printed"] == IMPORTED, detail
    unknown = passed_step(steps, detail, "mcp_unknown_template")["text"]
    assert "no-such-template" in unknown and "list_templates" in unknown, detail


def test_kernel_gateway_kernelspec_of_the_template(sdk_run):
    _, steps, detail = sdk_run
    spec = passed_step(steps, detail, "jupyter_kernelspec")
    assert {"python3", TEMPLATE} <= set(spec["names"]), detail
    metadata = spec["metadata"]
    assert metadata["cellbox_kind"] == "modules" and metadata["cellbox_packages"] == [], detail
    assert "cellbox_from" in metadata and metadata["cellbox_preload"] == MODULE, detail
    assert passed_step(steps, detail, "jupyter_kernel_import")["printed"] == IMPORTED, detail
