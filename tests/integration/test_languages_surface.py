"""Every language where a language is named (issue 23): /api/kernelspecs lists cellbox's
JavaScript, TypeScript and Bash beside python3 and the host's Jupyter kernels (a kernel.json the
test writes included); /v1 contexts and executes take a language, one default context per
language and sandbox; /v1/run runs blocks of each language; unknown names are 400s that list
the languages there are (docs/languages.md, "Names").

The kernels themselves are other parts' (docs/languages.md): the tests that need one to answer
are skipped while cellbox-kernel says "not built yet" for that language."""
import json
import os
import shutil
import subprocess

import pytest

from helpers.asserts import assert_v1_error, expect
from helpers.daemon import built
from helpers.v1 import V1
from helpers.wait import wait_until

pytestmark = pytest.mark.cellbox_only

NODE = os.access("/usr/bin/node", os.X_OK)
R = os.access("/usr/bin/R", os.X_OK) and os.path.isfile("/usr/share/jupyter/kernels/ir/kernel.json")


def kernel_built(flag):
    """False while cellbox-kernel answers `flag` with "not built yet" (another part's work)."""
    probe = subprocess.run([built("bin", "cellbox-kernel"), "--channel-fd=0", flag],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=20)
    return "not built yet" not in probe.stderr


needs_bash = pytest.mark.skipif(not kernel_built("--language=bash"),
                                reason="cellbox-kernel --language is not built on this branch")
needs_node = pytest.mark.skipif(not NODE or not kernel_built("--language=javascript"),
                                reason="no node, or cellbox-kernel --language is not built here")


@pytest.fixture(scope="module")
def languages_daemon(tmp_path_factory):
    """A daemon whose kernelspec path is the host's plus a directory this test writes: a minimal
    kernel.json that runs, one whose program is outside /usr, one that is not JSON, and a python3
    (cellbox's own wins)."""
    from helpers.daemon import Daemon
    extra = tmp_path_factory.mktemp("kernels")
    specs = {
        "echo-test": {"argv": ["/usr/bin/python3", "-c", "pass", "{connection_file}"],
                      "display_name": "Echo (test)", "language": "echo",
                      "env": {"ECHO_TEST": "1"}, "interrupt_mode": "message"},
        "outside": {"argv": ["/opt/elsewhere/kernel", "{connection_file}"],
                    "display_name": "Outside", "language": "outside"},
        "python3": {"argv": ["/usr/bin/python3", "-m", "ipykernel_launcher", "-f",
                             "{connection_file}"], "display_name": "Not cellbox", "language": "python"},
    }
    for name, spec in specs.items():
        (extra / name).mkdir()
        (extra / name / "kernel.json").write_text(json.dumps(spec))
    (extra / "echo-test" / "logo-64x64.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 16)
    (extra / "echo-test" / "secret.txt").write_text("not a resource")
    (extra / "broken").mkdir()
    (extra / "broken" / "kernel.json").write_text("{not json")
    path = f"{extra}:/usr/local/share/jupyter/kernels:/usr/share/jupyter/kernels"
    d = Daemon(args=["--pool-size", "0"], env={"CELLBOX_KERNELSPEC_PATH": path}).start()
    yield d
    d.finish()
    shutil.rmtree(extra, ignore_errors=True)


@pytest.fixture(scope="module")
def v1(languages_daemon):
    client = V1(languages_daemon)
    yield client
    client.cleanup()


@pytest.fixture(scope="module")
def box(v1):
    model = v1.create(timeout_s=0)
    yield model
    v1.remove(model["id"])


# ---- /api/kernelspecs ----

def test_kernelspecs_list_every_language(languages_daemon):
    c = languages_daemon.client()
    specs = expect(c.get("api/kernelspecs"), 200).json()
    assert specs["default"] == "python3"
    listed = specs["kernelspecs"]
    assert {"python3", "bash"} <= set(listed)
    assert listed["bash"]["spec"]["language"] == "bash"
    assert listed["bash"]["spec"]["display_name"] == "Bash"
    assert listed["bash"]["spec"]["argv"] == ["/opt/cellbox/bin/cellbox-kernel", "--channel-fd=3",
                                              "--language=bash"]
    if NODE:
        js, ts = listed["javascript"]["spec"], listed["typescript"]["spec"]
        assert js["display_name"] == "JavaScript (Node.js)" and js["language"] == "javascript"
        assert ts["display_name"] == "TypeScript (Node.js)" and ts["language"] == "typescript"
        assert "--language=javascript" in js["argv"] and "--share-dir=/opt/cellbox/share/cellbox" in js["argv"]
    if R:
        ir = listed["ir"]
        assert ir["spec"]["language"] == "R" and ir["spec"]["display_name"] == "R"
        argv = ir["spec"]["argv"]
        assert argv[:3] == ["/opt/cellbox/bin/cellbox-kernel", "--channel-fd=3", "--jupyter"]
        # IRkernel's bare "R" is found where the sandbox's PATH finds it, under /usr
        assert argv[argv.index("--") + 1] == "/usr/bin/R" and argv[-1] == "{connection_file}"
        assert ir["resources"]["logo-64x64"].endswith("/kernelspecs/ir/logo-64x64.png")
        logo = c.get("kernelspecs/ir/logo-64x64.png")
        assert logo.status_code == 200 and logo.content.startswith(b"\x89PNG")
        # only a host kernel's logos are resources, not the rest of its directory
        assert c.get("kernelspecs/ir/kernel.js").status_code == 404
        assert "kernel" not in ir["resources"]
    one = expect(c.get("api/kernelspecs/bash"), 200).json()
    assert one["name"] == "bash" and one["spec"]["language"] == "bash"


def test_a_kernelspec_the_test_writes_appears_and_bad_ones_are_skipped(languages_daemon):
    c = languages_daemon.client()
    listed = expect(c.get("api/kernelspecs"), 200).json()["kernelspecs"]
    echo = listed["echo-test"]
    assert echo["spec"]["display_name"] == "Echo (test)" and echo["spec"]["language"] == "echo"
    assert echo["spec"]["env"] == {"ECHO_TEST": "1"}
    assert echo["spec"]["interrupt_mode"] == "message"
    assert echo["spec"]["argv"] == ["/opt/cellbox/bin/cellbox-kernel", "--channel-fd=3", "--jupyter",
                                    "--interrupt-mode=message", "--", "/usr/bin/python3", "-c", "pass",
                                    "{connection_file}"]
    assert list(echo["resources"]) == ["logo-64x64"]
    assert c.get("kernelspecs/echo-test/logo-64x64.png").status_code == 200
    assert c.get("kernelspecs/echo-test/secret.txt").status_code == 404
    # cellbox's python3 wins over a host python3; the others cannot run sandboxed: not offered
    assert listed["python3"]["spec"]["display_name"] != "Not cellbox"
    assert "outside" not in listed and "broken" not in listed
    log = languages_daemon.log_text()
    assert "kernelspec outside" in log and "outside /usr" in log
    assert "kernelspec broken" in log and "not JSON" in log


def test_language_pools_take_only_language_kernelspecs():
    from helpers.daemon import run_daemon_to_exit
    refused = run_daemon_to_exit(["--language-pools", "python3:1"])
    assert refused.returncode != 0
    assert "--language-pools" in refused.stderr and "'python3'" in refused.stderr, refused.stderr
    refused = run_daemon_to_exit(["--language-pools", "bash:many"])
    assert refused.returncode != 0 and "from 0 to" in refused.stderr, refused.stderr


# ---- /v1 names ----

def test_unknown_language_is_400_listing_the_languages(v1, box):
    sid = box["id"]
    for url, body in ((f"v1/sandboxes/{sid}/contexts", {"language": "cobol"}),
                      (f"v1/sandboxes/{sid}/execute", {"language": "cobol", "code": "1"})):
        body_ = assert_v1_error(v1.post(url, json=body), 400, "cobol", "python", "bash")
        if NODE:
            assert "javascript" in body_["message"] and "typescript" in body_["message"]
        if R:
            assert ", r" in body_["message"]
    assert_v1_error(v1.post("v1/run", json={"language": "cobol", "code": "x"}), 400, "cobol", "javascript")


def test_a_context_of_each_language(v1, box):
    sid = box["id"]
    names = ["bash", "sh"] + (["js", "javascript", "ts", "typescript"] if NODE else []) + (["r"] if R else [])
    expected = {"sh": "bash", "js": "javascript", "ts": "typescript"}
    for name in names:
        c = expect(v1.post(f"v1/sandboxes/{sid}/contexts", json={"language": name}), 201).json()
        assert c["language"] == expected.get(name, name) and c["default"] is False, c
        assert c["cwd"] == "/workspace"
        listed = expect(v1.get(f"v1/sandboxes/{sid}/contexts"), 200).json()
        assert c["id"] in [x["id"] for x in listed]
        assert expect(v1.delete(f"v1/sandboxes/{sid}/contexts/{c['id']}"), 204)
    # python is still the sandbox's own kernel
    c = expect(v1.post(f"v1/sandboxes/{sid}/contexts", json={"language": "python"}), 201).json()
    assert c["language"] == "python" and c["kernelspec"] == "python3"


def test_execute_with_a_language_reuses_one_context_per_language(v1, fresh_box):
    sid = fresh_box["id"]
    before = expect(v1.get(f"v1/sandboxes/{sid}/contexts"), 200).json()
    assert len(before) == 1
    for _ in range(2):
        v1.execute(sid, "echo hi", language="bash")
        v1.execute(sid, "echo hi", language="sh")
    # python names the sandbox's own kernel: its default context, none made
    assert v1.value(sid, "6 * 7", language="python") == "42"
    listed = expect(v1.get(f"v1/sandboxes/{sid}/contexts"), 200).json()
    bash = [c for c in listed if c["language"] == "bash"]
    assert len(listed) == 2 and len(bash) == 1 and bash[0]["default"] is False, listed


@pytest.fixture
def fresh_box(v1):
    model = v1.create(timeout_s=0)
    yield model
    v1.remove(model["id"])


@needs_bash
def test_bash_context_state_persists_through_execute_language(v1, fresh_box):
    sid = fresh_box["id"]
    v1.execute(sid, "cd /tmp; GREETING=hello", language="bash")
    ev = v1.execute(sid, 'echo "$GREETING from $PWD"', language="bash")
    assert ev.stdout == "hello from /tmp\n", ev


@needs_bash
def test_python_js_and_bash_contexts_share_the_sandbox_files(v1, fresh_box):
    sid = fresh_box["id"]
    v1.execute(sid, "echo from-bash > /workspace/shared.txt", language="bash")
    assert v1.value(sid, "open('/workspace/shared.txt').read()") == "'from-bash\\n'"
    if NODE and kernel_built("--language=javascript"):
        ev = v1.execute(sid, "require('fs').readFileSync('/workspace/shared.txt', 'utf8').trim()",
                        language="js")
        assert not ev.errors and "from-bash" in ev.main_result.get("text", ""), ev


# ---- /v1/run ----

@pytest.mark.skipif(not NODE, reason="no node")
def test_run_blocks_of_javascript_and_typescript(v1):
    r = expect(v1.post("v1/run", json={"code_blocks": [
        {"language": "js", "code": "console.log('js', 1 + 1)"},
        {"language": "typescript", "code": "const n: number = 40;\nconsole.log('ts', n + 2)"},
        {"language": "javascript", "code": "console.error('bad'); process.exit(3)"},
    ]}, timeout=120), 200).json()
    assert r["stdout"] == "js 2\nts 42\n" and r["stderr"] == "bad\n", r
    assert [b["language"] for b in r["blocks"]] == ["javascript", "typescript", "javascript"]
    assert r["exit_code"] == 3 and r["status"] == "error"


@pytest.mark.skipif(not os.access("/usr/bin/Rscript", os.X_OK), reason="no R")
def test_run_block_of_r(v1):
    r = expect(v1.post("v1/run", json={"language": "r", "code": "cat(6 * 7, '\\n')"}, timeout=120),
               200).json()
    assert r["exit_code"] == 0 and r["stdout"].endswith("42 \n"), r


# ---- the Kernel Gateway API and R ----

@needs_node
def test_kernel_gateway_starts_a_javascript_kernel_by_name(languages_daemon):
    c = languages_daemon.client()
    k = c.create_kernel(name="javascript")
    assert k["name"] == "javascript"
    with c.ready_ws(k["id"]) as ws:
        assert ws.execute("const answer = 6 * 7; answer").result_data()["text/plain"] == "42"


@pytest.mark.skipif(not R or not kernel_built("--jupyter"), reason="no IRkernel, or no bridge here")
def test_execute_in_r_through_its_jupyter_kernel_reuses_its_context(v1, fresh_box):
    sid = fresh_box["id"]
    v1.execute(sid, "x <- 6 * 7", language="r", timeout=120)
    # IRkernel shows a value as display_data (text, html, markdown, latex), not execute_result
    ev = v1.execute(sid, "x", language="r")
    assert not ev.errors and [r["text"] for r in ev.results] == ["[1] 42"], ev
    listed = expect(v1.get(f"v1/sandboxes/{sid}/contexts"), 200).json()
    r = [c for c in listed if c["language"] == "r"]
    assert len(r) == 1 and r[0]["kernelspec"] == "ir", listed


@needs_bash
def test_a_language_pool_hands_out_its_kernels(make_daemon):
    d = make_daemon(args=["--pool-size", "0", "--language-pools", "bash:1"])
    c = d.client()
    wait_until(lambda: c.get("api").json()["templates"]["bash"]["warm_pool_ready"] == 1, timeout=60,
               message="bash's warm pool")
    k = c.create_kernel(name="bash")
    assert f"kernel {k['id']} taken from the warm pool (bash" in d.log_text()
    with c.ready_ws(k["id"]) as ws:
        assert ws.execute("echo $((6 * 7))").stdout == "42\n"
