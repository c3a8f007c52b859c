"""JavaScript, TypeScript, Bash and R kernels end to end (issue 23), through the Kernel Gateway
(POST /api/kernels {name}, the WebSocket channels) and /v1 (contexts {language}, execute): state
kept across cells, streams in order, rich results, errors with tracebacks, interrupt, the per-cell
timeout, a dead kernel reported with its cause, restart; one sandbox whose languages share its
files; and a Jupyter kernel the test installs, listed and run sandboxed.

Each language's cells are in helpers/languages.py. One KG kernel per language (and one /v1
sandbox with a context per language) serves the tests that leave it as they found it; the tests
that kill, time out or restart a kernel make their own.
"""
import base64
import json
import os
import re

import pytest

from helpers.asserts import expect
from helpers.languages import ALL, BASH, JAVASCRIPT, PNG_1x1, R, TYPESCRIPT, missing_runtime
from helpers.v1 import V1
from helpers.wait import wait_until

pytestmark = pytest.mark.cellbox_only

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CELL_TIMEOUT = 60  # seconds for one cell's messages (R's first cell loads its packages)
OUTPUT_LINES = 300

LANGS = [pytest.param(lang, id=lang.name,
                      marks=pytest.mark.skipif(missing_runtime(lang) is not None,
                                               reason=str(missing_runtime(lang))))
         for lang in ALL]
# (the cell that kills the kernel, what the cell's error says, what the kernel's model says)
DEATHS = {
    "exit": (lambda lang: lang.exit_code, lambda lang: rf"exited with status {lang.exit_status}\b",
             lambda lang: rf"^kernel died: exited with status {lang.exit_status}\b"),
    "sigkill": (lambda lang: lang.kill_self, lambda lang: r"killed by signal 9\b",
                lambda lang: r"^kernel died: killed by signal 9 \(SIGKILL\b"),
}


# ------------------------------------------------------------------ helpers

def shown_text(res):
    """text/plain of what a cell showed as its value: the execute_result, or the display_data a
    kernel uses instead (IRkernel shows values as display_data)."""
    shown = res.of_type("execute_result") or res.of_type("display_data")
    assert shown, f"the cell showed no value: {res.types}"
    return shown[-1]["content"]["data"].get("text/plain")


def check_answer(ws, lang, code, text):
    """Run `code`; its value (or, for bash, its stdout) is `text`."""
    res = ws.execute(code, timeout=CELL_TIMEOUT)
    assert res.reply["content"]["status"] == "ok", res.reply["content"]
    if lang is BASH:
        assert res.stdout == text, res.messages
    else:
        assert shown_text(res) == text, res.messages
    return res


def v1_text(ev):
    """The text of what a /v1 cell showed: its main result, else its last result."""
    mains = [e for e in ev.results if e.get("is_main_result")]
    shown = mains or ev.results
    assert shown, f"the cell showed no value: {ev!r}"
    return shown[-1].get("text")


def v1_check_answer(v1, sid, lang, code, text, **body):
    ev = v1.execute(sid, code, **body)
    assert not ev.errors, ev.errors
    if lang is BASH:
        assert ev.stdout == text, ev
    else:
        assert v1_text(ev) == text, ev
    return ev


def started(ws, req, marker):
    """Wait until the cell `req` printed `marker` (it is running)."""
    mine = req["header"]["msg_id"]
    ws.wait_for(lambda m: (m.get("parent_header") or {}).get("msg_id") == mine
                and m["msg_type"] == "stream" and marker in m["content"]["text"],
                timeout=CELL_TIMEOUT, what=f"{marker!r} from the running cell")


def dead_cause(res):
    """What the cell's error says of the kernel's end: the daemon's KernelDied, or the bash
    kernel's own ShellExited (it sees its shell end and says so before it ends the same way)."""
    err = res.first("error")["content"]
    assert err["ename"] in ("KernelDied", "ShellExited"), err
    if err["ename"] == "KernelDied":
        assert err["evalue"].startswith("kernel died: ") and "dead" in res.statuses, (err, res.types)
    return err["evalue"]


# ------------------------------------------------------------------ fixtures

@pytest.fixture(scope="module")
def lang_kernels(daemon):
    """lang -> a KG kernel of that language, made on first use, for the whole module."""
    client = daemon.client()
    made = {}

    def kernel_of(lang):
        if lang.name not in made:
            made[lang.name] = client.create_kernel(name=lang.kernelspec)
        return made[lang.name]

    yield kernel_of
    client.cleanup()


@pytest.fixture
def lang_ws(daemon, lang_kernels, lang):
    conn = daemon.client().ready_ws(lang_kernels(lang)["id"])
    yield conn
    conn.close()


@pytest.fixture(scope="module")
def v1(daemon):
    client = V1(daemon)
    yield client
    client.cleanup()


@pytest.fixture(scope="module")
def box(v1):
    """One /v1 sandbox (Python's) that every language's context lives in."""
    model = v1.create(timeout_s=0)
    yield model
    v1.remove(model["id"])


@pytest.fixture(scope="module")
def contexts(v1, box):
    """lang -> a context of that language in `box`, made on first use."""
    made = {}

    def context_of(lang):
        if lang.name not in made:
            made[lang.name] = new_context(v1, box["id"], lang)
        return made[lang.name]

    return context_of


def new_context(v1, sid, lang):
    ctx = expect(v1.post(f"v1/sandboxes/{sid}/contexts", json={"language": lang.v1}), 201).json()
    assert ctx["language"].lower() in (lang.v1, lang.name), ctx
    assert ctx["default"] is False and ctx["id"] != sid, ctx
    return ctx


# ------------------------------------------------------------------ Kernel Gateway

def test_kernelspecs_list_every_language(daemon):
    specs = expect(daemon.client().get("api/kernelspecs"), 200).json()["kernelspecs"]
    for lang in ALL:
        if missing_runtime(lang):
            continue
        assert lang.kernelspec in specs, sorted(specs)
        spec = specs[lang.kernelspec]["spec"]
        assert spec["language"].lower() in (lang.name, lang.v1), spec
        assert spec["display_name"], spec
    assert "python3" in specs


@pytest.mark.parametrize("lang", LANGS)
def test_kg_state_kept_across_cells(lang_ws, lang):
    res = lang_ws.execute(lang.set_state, timeout=CELL_TIMEOUT)
    assert res.reply["content"]["status"] == "ok", res.reply["content"]
    assert res.statuses == ["busy", "idle"], res.types
    assert res.first("execute_input")["content"]["code"] == lang.set_state
    check_answer(lang_ws, lang, lang.read_state, lang.state_text)


@pytest.mark.parametrize("lang", LANGS)
def test_kg_streams_come_in_order_before_the_value_and_idle(lang_ws, lang):
    res = lang_ws.execute(lang.print_then_value, timeout=CELL_TIMEOUT)
    assert res.reply["content"]["status"] == "ok", res.reply["content"]
    types = [m["msg_type"] for m in res.iopub]
    assert types[-1] == "status" and res.iopub[-1]["content"]["execution_state"] == "idle", types
    assert res.stdout.startswith("first\n"), res.messages
    assert "second" in res.stderr, res.messages
    first_out = next(i for i, m in enumerate(res.iopub)
                     if m["msg_type"] == "stream" and "first" in m["content"]["text"])
    if lang is BASH:
        assert res.stdout == "first\n42\n", res.messages
        assert "execute_result" not in types and "display_data" not in types, types
    else:
        shown = max(i for i, t in enumerate(types) if t in ("execute_result", "display_data"))
        assert first_out < shown < len(types) - 1, types
        assert shown_text(res) == lang.value_text


@pytest.mark.parametrize("lang", LANGS)
def test_kg_all_output_comes_before_the_reply_and_idle(lang_ws, lang):
    """A cell that prints fast and ends at once: every line reaches the client under the cell,
    before its idle (none is lost or comes after), five times over."""
    lines = "".join(f"line {i}\n" for i in range(OUTPUT_LINES))
    for _ in range(5):
        res = lang_ws.execute(lang.many_lines.format(n=OUTPUT_LINES), timeout=CELL_TIMEOUT)
        assert res.reply["content"]["status"] == "ok", res.reply["content"]
        assert res.stdout == lines, f"{len(res.stdout.splitlines())} of {OUTPUT_LINES} lines before idle: {res.types}"


@pytest.mark.parametrize("lang", LANGS)
def test_kg_rich_results(lang_ws, lang):
    if lang in (JAVASCRIPT, TYPESCRIPT):
        res = lang_ws.execute(f"display.html('<b>bold</b>');\ndisplay.png('{PNG_1x1}');\n'done'",
                              timeout=CELL_TIMEOUT)
        bundles = [m["content"]["data"] for m in res.of_type("display_data")]
        assert any("<b>bold</b>" in b.get("text/html", "") for b in bundles), bundles
        pngs = [b["image/png"] for b in bundles if "image/png" in b]
        assert pngs and base64.b64decode(pngs[0]).startswith(PNG_MAGIC), bundles
        assert res.result_data()["text/plain"] == "'done'"
    elif lang is R:
        res = lang_ws.execute("data.frame(a = 1:2, b = c('x', 'y'))", timeout=CELL_TIMEOUT)
        shown = (res.of_type("execute_result") or res.of_type("display_data"))[-1]["content"]["data"]
        assert "<table" in shown.get("text/html", ""), shown
        res = lang_ws.execute("plot(1:10)", timeout=CELL_TIMEOUT)
        pngs = [m["content"]["data"]["image/png"] for m in res.of_type("display_data")
                if "image/png" in m["content"]["data"]]
        assert pngs and base64.b64decode(pngs[0]).startswith(PNG_MAGIC), res.types
    else:
        res = lang_ws.execute("printf 'plain %s\\n' text", timeout=CELL_TIMEOUT)
        assert res.stdout == "plain text\n", res.messages
        assert not res.of_type("display_data") and not res.of_type("execute_result"), res.types
    assert res.reply["content"]["status"] == "ok", res.reply["content"]


@pytest.mark.parametrize("lang", LANGS)
def test_kg_error_with_traceback(lang_ws, lang):
    res = lang_ws.execute(lang.error, timeout=CELL_TIMEOUT)
    reply = res.reply["content"]
    assert reply["status"] == "error", reply
    err = res.first("error")["content"]
    assert reply["ename"] == err["ename"] and reply["evalue"] == err["evalue"], (reply, err)
    if lang.error_name:
        assert err["ename"] == lang.error_name, err
    assert isinstance(err["traceback"], list) and err["traceback"], err
    told = err["evalue"] + "\n" + "\n".join(err["traceback"])
    if lang is BASH:
        assert re.search(r"\b1\b", told), err          # the status of `false`
        assert res.stdout == "before\n", res.messages
    else:
        assert lang.error_value in err["evalue"], err
    if lang.traceback_names:
        assert lang.traceback_names in "\n".join(err["traceback"]), err["traceback"]
    check_answer(lang_ws, lang, lang.alive, lang.alive_text)


@pytest.mark.parametrize("lang", LANGS)
def test_kg_interrupt_stops_the_cell_and_the_kernel_answers(daemon, lang_kernels, lang_ws, lang):
    kid = lang_kernels(lang)["id"]
    req = lang_ws.send_execute(lang.spin)
    started(lang_ws, req, "spinning")
    expect(daemon.client().post(f"api/kernels/{kid}/interrupt"), 204)
    res = lang_ws.collect(req, timeout=CELL_TIMEOUT)
    assert "dead" not in res.statuses, res.types
    reply = res.reply["content"]
    if lang is not R:  # IRkernel answers an interrupted cell as it likes; its next cell matters
        assert reply["status"] == "error", reply
    if lang is BASH:
        assert "130" in reply["evalue"] + "".join(reply.get("traceback", [])), reply
    check_answer(lang_ws, lang, lang.alive, lang.alive_text)


@pytest.mark.parametrize("lang", LANGS)
def test_kg_cell_timeout_interrupts_the_cell(cb, lang):
    """The sandbox's per-cell limit (`limits.timeout`) interrupts a cell that runs past it."""
    k = cb.create_kernel(name=lang.kernelspec, limits={"timeout": 2})
    with cb.ready_ws(k["id"]) as ws:
        res = ws.execute(lang.spin, timeout=CELL_TIMEOUT)
        assert "spinning" in res.stdout, res.messages
        assert "timeout after 2 s" in res.stderr, res.messages
        assert "dead" not in res.statuses, res.types
        check_answer(ws, lang, lang.alive, lang.alive_text)


@pytest.mark.parametrize("cause", sorted(DEATHS))
@pytest.mark.parametrize("lang", LANGS)
def test_kg_dead_kernel_reported_with_its_cause_then_restart(cb, lang, cause):
    code_of, cause_of, reason_of = DEATHS[cause]
    k = cb.create_kernel(name=lang.kernelspec)
    kid = k["id"]
    with cb.ready_ws(kid) as ws:
        assert ws.execute(lang.set_state, timeout=CELL_TIMEOUT).reply["content"]["status"] == "ok"
        res = ws.collect(ws.send_execute(code_of(lang)), timeout=CELL_TIMEOUT)
        assert re.search(cause_of(lang), dead_cause(res)), dead_cause(res)
        assert res.reply["content"]["status"] == "error", res.reply["content"]
        if "dead" not in res.statuses:  # bash's kernel: idle for the cell, then dead
            ws.wait_for(lambda m: m["msg_type"] == "status" and m["content"]["execution_state"] == "dead",
                        timeout=30, what="status dead")
    model = wait_until(lambda: (m := cb.kernel_model(kid))["execution_state"] == "dead" and m,
                       timeout=30, message="the kernel's model to say dead")
    assert re.search(reason_of(lang), model.get("reason", "")), model
    expect(cb.post(f"api/kernels/{kid}/restart"), 200)
    with cb.ready_ws(kid) as ws:
        check_answer(ws, lang, lang.forgotten, lang.forgotten_text)
        check_answer(ws, lang, lang.alive, lang.alive_text)


@pytest.mark.parametrize("lang", LANGS)
def test_kg_restart_forgets_the_state(cb, lang):
    k = cb.create_kernel(name=lang.kernelspec)
    with cb.ready_ws(k["id"]) as ws:
        assert ws.execute(lang.set_state, timeout=CELL_TIMEOUT).reply["content"]["status"] == "ok"
    expect(cb.post(f"api/kernels/{k['id']}/restart"), 200)
    with cb.ready_ws(k["id"]) as ws:
        check_answer(ws, lang, lang.forgotten, lang.forgotten_text)
        info = ws.kernel_info().reply["content"]
        assert info["language_info"]["name"].lower() in (lang.name, lang.v1), info


# ------------------------------------------------------------------ /v1

@pytest.mark.parametrize("lang", LANGS)
def test_v1_context_keeps_state_and_streams_in_order(v1, box, contexts, lang):
    sid, cid = box["id"], contexts(lang)["id"]
    ev = v1.execute(sid, lang.set_state, context_id=cid)
    assert not ev.errors, ev.errors
    v1_check_answer(v1, sid, lang, lang.read_state, lang.state_text, context_id=cid)
    ev = v1.execute(sid, lang.print_then_value, context_id=cid)
    assert not ev.errors, ev.errors
    assert ev.stdout.startswith("first\n") and "second" in ev.stderr, ev
    first = next(i for i, e in enumerate(ev) if e.get("type") == "stdout" and "first" in e["text"])
    if lang is BASH:
        assert ev.stdout == "first\n42\n" and not ev.results, ev
    else:
        shown = max(i for i, e in enumerate(ev) if e.get("type") == "result")
        assert first < shown < len(ev) - 1, ev.types
        assert v1_text(ev) == lang.value_text, ev
    # the sandbox's Python knows nothing of it
    assert v1.value(sid, "'counter' in dir()") == "False"


@pytest.mark.parametrize("lang", LANGS)
def test_v1_all_output_comes_before_the_end(v1, box, contexts, lang):
    sid, cid = box["id"], contexts(lang)["id"]
    lines = "".join(f"line {i}\n" for i in range(OUTPUT_LINES))
    for _ in range(3):
        ev = v1.execute(sid, lang.many_lines.format(n=OUTPUT_LINES), context_id=cid)
        assert not ev.errors, ev.errors
        assert ev.stdout == lines, f"{len(ev.stdout.splitlines())} of {OUTPUT_LINES} lines before the end"


@pytest.mark.parametrize("lang", LANGS)
def test_v1_execute_by_language_uses_one_context_of_that_language(v1, box, lang):
    sid = box["id"]
    assert not v1.execute(sid, lang.set_state, language=lang.v1).errors
    v1_check_answer(v1, sid, lang, lang.read_state, lang.state_text, language=lang.v1)
    listed = expect(v1.get(f"v1/sandboxes/{sid}/contexts"), 200).json()
    mine = [c for c in listed if c["language"].lower() in (lang.v1, lang.name)]
    assert mine, listed


@pytest.mark.parametrize("lang", LANGS)
def test_v1_rich_results_and_errors(v1, box, contexts, lang):
    sid, cid = box["id"], contexts(lang)["id"]
    if lang in (JAVASCRIPT, TYPESCRIPT):
        ev = v1.execute(sid, f"display.html('<b>bold</b>');\ndisplay.png('{PNG_1x1}');\n'done'",
                        context_id=cid)
        assert any("<b>bold</b>" in e.get("html", "") for e in ev.results), ev
        pngs = [e["png"] for e in ev.results if "png" in e]
        assert pngs and base64.b64decode(pngs[0]).startswith(PNG_MAGIC), ev
    elif lang is R:
        ev = v1.execute(sid, "data.frame(a = 1:2, b = c('x', 'y'))", context_id=cid)
        assert any("<table" in e.get("html", "") for e in ev.results), ev
        ev = v1.execute(sid, "plot(1:10)", context_id=cid)
        pngs = [e["png"] for e in ev.results if "png" in e]
        assert pngs and base64.b64decode(pngs[0]).startswith(PNG_MAGIC), ev
    ev = v1.execute(sid, lang.error, context_id=cid)
    err = ev.one("error")
    if lang.error_name:
        assert err["name"] == lang.error_name, err
    assert isinstance(err["traceback"], str), err
    if lang is not BASH:
        assert lang.error_value in err["value"], err
    else:
        assert re.search(r"\b1\b", err["value"] + err["traceback"]), err


@pytest.mark.parametrize("lang", LANGS)
def test_v1_timeout_interrupts_and_the_context_answers(v1, box, contexts, lang):
    sid, cid = box["id"], contexts(lang)["id"]
    ev = v1.execute(sid, lang.spin, context_id=cid, timeout_s=2)
    err = ev.one("error")
    assert err["name"] == "TimeoutError", err
    assert ev.one("accounting")["timed_out"] is True, ev
    assert "spinning" in ev.stdout, ev
    v1_check_answer(v1, sid, lang, lang.alive, lang.alive_text, context_id=cid)


@pytest.mark.parametrize("lang", LANGS)
def test_v1_dead_context_named_then_restart(v1, box, lang):
    sid = box["id"]
    ctx = new_context(v1, sid, lang)
    assert not v1.execute(sid, lang.set_state, context_id=ctx["id"]).errors
    ev = v1.execute(sid, lang.exit_code, context_id=ctx["id"])
    err = ev.one("error")
    assert err["name"] in ("KernelDied", "ShellExited"), err  # bash's kernel names its shell's end
    assert re.search(rf"exited with status {lang.exit_status}\b", err["value"]), err

    def state():
        listed = expect(v1.get(f"v1/sandboxes/{sid}/contexts"), 200).json()
        return next(c for c in listed if c["id"] == ctx["id"])

    wait_until(lambda: state()["state"] == "dead", timeout=30, message="the context to be dead")
    assert re.search(rf"exited with status {lang.exit_status}\b", state().get("reason", "")), state()
    expect(v1.post(f"v1/sandboxes/{sid}/contexts/{ctx['id']}/restart"), 200)
    v1_check_answer(v1, sid, lang, lang.forgotten, lang.forgotten_text, context_id=ctx["id"])
    # the sandbox's own kernel never noticed
    assert v1.value(sid, "6 * 7") == "42"
    expect(v1.delete(f"v1/sandboxes/{sid}/contexts/{ctx['id']}"), 204)


def test_languages_in_one_sandbox_share_its_files(v1):
    """Python, JavaScript and Bash contexts of one sandbox: what one writes the others read."""
    langs = [lang for lang in (JAVASCRIPT, BASH) if not missing_runtime(lang)]
    box = v1.create(timeout_s=0)
    sid = box["id"]
    try:
        assert not v1.execute(sid, "open('/workspace/from-python.txt', 'w').write('python wrote this')").errors
        for lang in langs:
            assert not v1.execute(sid, lang.write_file, language=lang.v1).errors
        written = {"python": "python wrote this", "javascript": "js wrote this", "bash": "bash wrote this"}
        files = {"python": "from-python.txt", "javascript": "from-js.txt", "bash": "from-bash.txt"}
        for reader in langs:
            for writer in ["python"] + [lang.name for lang in langs]:
                ev = v1.execute(sid, reader.read_file.format(name=files[writer]), language=reader.v1)
                assert not ev.errors, ev.errors
                seen = ev.stdout if reader is BASH else v1_text(ev)
                assert written[writer] in seen, (reader, writer, ev)
        for lang in langs:
            name = files[lang.name]
            assert v1.value(sid, f"open('/workspace/{name}').read()") == repr(written[lang.name])
            assert v1.read(sid, f"/workspace/{name}") == written[lang.name].encode()
    finally:
        v1.remove(sid)


# ------------------------------------------------------------------ an installed kernel

def write_ipykernel_spec(root, name="extra-ipy"):
    """A kernelspec directory (as `jupyter kernelspec install` makes one) for Debian's ipykernel."""
    spec_dir = os.path.join(root, name)
    os.makedirs(spec_dir)
    with open(os.path.join(spec_dir, "kernel.json"), "w") as f:
        json.dump({"argv": ["/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                   "display_name": "Extra IPython (test)", "language": "python"}, f)
    return name


@pytest.mark.skipif(not os.path.exists("/usr/lib/python3/dist-packages/ipykernel_launcher.py"),
                    reason="Debian's python3-ipykernel is not installed")
def test_an_installed_jupyter_kernel_is_listed_and_runs_sandboxed(make_daemon, tmp_path):
    kernels_dir = tmp_path / "kernels"
    name = write_ipykernel_spec(str(kernels_dir))
    canary = tmp_path / "host-only-canary.txt"
    canary.write_text("the host's")
    d = make_daemon(args=["--kernelspec-path", str(kernels_dir)])
    c = d.client()
    specs = expect(c.get("api/kernelspecs"), 200).json()["kernelspecs"]
    assert name in specs, sorted(specs)
    assert specs[name]["spec"]["display_name"] == "Extra IPython (test)", specs[name]
    assert specs[name]["spec"]["language"] == "python", specs[name]
    assert "python3" in specs  # cellbox's own Python is still there, still the default
    k = c.create_kernel(name=name)
    try:
        with c.ready_ws(k["id"]) as ws:
            info = ws.kernel_info().reply["content"]
            assert info["implementation"] == "ipython", info  # the installed kernel, not cellbox's
            res = ws.execute(
                "import os, json\n"
                f"print(json.dumps([os.getuid(), os.stat('/workspace').st_uid, os.getcwd(),"
                f" os.path.exists({str(canary)!r}), os.readlink('/proc/self/ns/pid'),"
                " os.readlink('/proc/self/ns/mnt')]))",
                timeout=CELL_TIMEOUT)
            assert res.reply["content"]["status"] == "ok", res.reply["content"]
            uid, workspace_owner, cwd, sees_host_file, pidns, mntns = json.loads(res.stdout)
            # the sandbox's own user (each sandbox has one), never root or the host's
            assert uid == workspace_owner and uid not in (0, os.getuid()), (uid, workspace_owner)
            assert cwd == "/workspace", cwd
            assert sees_host_file is False
            assert pidns != os.readlink("/proc/self/ns/pid") and mntns != os.readlink("/proc/self/ns/mnt")
            check = ws.execute("x = 20\nx * 2 + 2", timeout=CELL_TIMEOUT)
            assert check.result_data()["text/plain"] == "42"
        assert canary.read_text() == "the host's"
    finally:
        c.cleanup()
