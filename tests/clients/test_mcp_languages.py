"""The MCP server with the official TypeScript SDK's Client (tests/clients/node/mcp_languages.mjs)
running JavaScript, TypeScript, Bash and R (issue 23): run_code with `language` (a value with
its output, an error named as an error) and create_context with a language, whose context keeps
state between run_code calls. Every step the script reports is checked here.

The npm packages come from `scripts/install-deps.sh test` (npm ci in tests/clients/node)."""
import json
import os
import shutil
import subprocess

import pytest

from helpers.languages import BASH, JAVASCRIPT, R, TYPESCRIPT, missing_runtime

pytestmark = pytest.mark.cellbox_only  # Jupyter Server has no MCP endpoint

NODE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node")
TIMEOUT = 200
OUTPUT = {JAVASCRIPT: "from js", TYPESCRIPT: None, BASH: "from bash", R: "from r"}


@pytest.fixture(scope="module")
def scenario(daemon):
    """The script's steps, run once for this module's tests: (langs, steps, detail)."""
    node = shutil.which("node")
    assert node, "node is not installed (scripts/install-deps.sh test installs it)"
    langs = [lang for lang in OUTPUT if not missing_runtime(lang)]
    env = dict(os.environ, CELLBOX_URL=daemon.origin, CELLBOX_TOKEN=daemon.token,
               CELLBOX_LANGUAGES=",".join(lang.name for lang in langs),
               CELLBOX_CLIENT_DEADLINE_MS=str((TIMEOUT - 20) * 1000))
    proc = subprocess.run([node, "mcp_languages.mjs"], cwd=NODE_DIR, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    detail = f"exit {proc.returncode}\nstdout:\n{proc.stdout[-6000:]}\nstderr:\n{proc.stderr[-3000:]}"
    assert lines, f"no summary from mcp_languages.mjs\n{detail}"
    return langs, json.loads(lines[-1])["steps"], detail


def passed(steps, name, detail):
    assert name in steps, f"step {name} never reported\n{detail}"
    assert steps[name]["ok"], f"step {name} failed: {json.dumps(steps[name], indent=1)[:3000]}"
    return steps[name]


def test_run_code_in_every_language(scenario):
    langs, steps, detail = scenario
    tools = passed(steps, "connect", detail)
    for lang in langs:
        assert lang.name in (tools["run_code_languages"] or []), tools
        value = passed(steps, f"value_{lang.name}", detail)
        assert not value["isError"] and "42" in value["text"], value
        if OUTPUT[lang]:  # the output, then the value
            assert OUTPUT[lang] in value["text"], value
            assert value["text"].index(OUTPUT[lang]) < value["text"].rindex("42"), value
        error = passed(steps, f"error_{lang.name}", detail)
        assert error["isError"] and "mcp boom" in error["text"], error


def test_create_context_with_a_language_keeps_state(scenario):
    langs, steps, detail = scenario
    tools = passed(steps, "connect", detail)
    assert tools["create_context"] is not None, f"no create_context tool: {tools}"
    assert "language" in tools["create_context"]["properties"], tools
    for lang in langs:
        context = passed(steps, f"context_{lang.name}", detail)
        assert not context["made"]["isError"] and context["context_id"], context
        assert not context["set"]["isError"], context
        assert not context["got"]["isError"] and "42" in context["got"]["text"], context
