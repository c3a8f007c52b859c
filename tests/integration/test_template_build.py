"""Templates built from Dockerfiles without Docker (model/template_build.h, POST /v1/templates,
`cellbox template build`): each RUN in a build sandbox whose changes become a layer, COPY from
the build context, ENV/WORKDIR/LABEL as the template's settings, the NDJSON stream of steps and
output, the errors known before any step, a failing step that leaves nothing behind, and the
cache of layers keyed by step.

One cellboxd with --allow-network and the tests' own small internet (helpers/test_internet.py):
pip installs the wheel cellbox-nettest from the index at 203.0.113.20, the only address used."""
import os
import re
import signal
import subprocess
import threading

import pytest

from helpers.daemon import Daemon, cli_binary, finish_or_fail, serve
from helpers.network_ranges import unrouted_range
from helpers.template_build import layer_dirs, leftovers, post_build
from helpers.test_internet import INDEX_ADDRESS, small_internet
from helpers.v1 import V1
from helpers.wait import wait_until

pytestmark = pytest.mark.cellbox_only

TIMEOUT = 300


@pytest.fixture(scope="module")
def internet():
    with small_internet(big_file_bytes=1024 * 1024) as built:
        yield built


@pytest.fixture(scope="module")
def daemon(internet):
    # Template zygotes on: a built template's kernels are clones of a zygote that preloaded its
    # packages (off by default: that zygote runs the template's code on the host).
    args = ["--allow-network", "--network-range", str(unrouted_range()), "--pool-size", "0",
            "--template-zygotes=true"]
    yield from serve(Daemon(args=args).start())


@pytest.fixture(scope="module")
def v1(daemon):
    client = V1(daemon)
    yield client
    client.cleanup()


def delete_template(daemon, name):
    return daemon.client().delete(f"v1/templates/{name}", timeout=60)


def template_exists(daemon, name):
    return daemon.client().get(f"v1/templates/{name}", timeout=30).status_code == 200


def index_requests(internet):
    with open(os.path.join(internet.workdir, "index.log"), errors="replace") as f:
        return f.read().count("GET /simple/cellbox-nettest")


def records(daemon):
    folder = os.path.join(daemon.data_dir, "sandboxes")
    return set(os.listdir(folder)) if os.path.isdir(folder) else set()


def build_sandboxes(daemon, name):
    """The ids of the build sandboxes the daemon says it made for template `name`."""
    pattern = re.compile(rf"template build {re.escape(name)}: step \d+ runs in build sandbox (\S+)")
    return pattern.findall(daemon.log_text())


def nothing_left(daemon, name):
    """No staged layer, no build view (mounted or not), no record of the build's sandboxes (a
    record goes only once its cgroup is removed; its uid and network slot go before)."""
    left = [x for x in leftovers(daemon) if not x.startswith("sandboxes/")]
    ids = build_sandboxes(daemon, name)
    return ids and not left and not any(f"{i}.json" in records(daemon) for i in ids)


PIP_DOCKERFILE = f"""# syntax=docker/dockerfile:1
FROM e2bdev/code-interpreter:latest
ENV PIP_INDEX_URL=http://{INDEX_ADDRESS}/simple PIP_TRUSTED_HOST={INDEX_ADDRESS}
RUN pip install cellbox-nettest
COPY hello.txt /app/hello.txt
COPY data/ /opt/data/
ENV GREETING="hi there"
WORKDIR /app
LABEL cellbox.preload="cellbox_nettest"
"""
CONTEXT = {"hello.txt": "hello from the context\n", "data/one.txt": "1\n",
           "data/deep/two.txt": "2\n"}


def test_a_dockerfile_with_pip_copy_env_workdir_and_preload_makes_a_template(daemon, v1, internet):
    build = post_build(daemon, "withnettest", PIP_DOCKERFILE, context=CONTEXT)
    assert build.status == 200, build
    assert build.last["type"] == "done", build
    steps = build.steps()
    assert [s["step"] for s in steps] == list(range(1, 9))
    assert all(s["steps"] == 8 for s in steps)
    assert steps[2]["instruction"] == "RUN pip install cellbox-nettest" and steps[2]["line"] == 4
    assert not steps[2]["cached"]
    assert len(build.of("step_done")) == 8
    assert "Successfully installed cellbox-nettest" in build.output(step=3), build.output()
    model = build.last["template"]
    assert model["name"] == "withnettest" and model["kind"] == "dockerfile"
    assert model["preload"] == "cellbox_nettest" and model["workdir"] == "/app"
    assert any(p.startswith("cellbox-nettest==") or p.startswith("cellbox_nettest==")
               for p in model["packages"]), model

    # Its zygote runs in the template's view and imports the preload list once for every kernel.
    c = daemon.client()
    wait_until(lambda: c.get("api").json()["templates"]["withnettest"]["zygote_ready"],
               timeout=120, message="withnettest's zygote")
    sid = v1.create(template="withnettest")["id"]
    try:
        seen = eval(v1.value(sid, """import os, sys
preloaded = 'cellbox_nettest' in sys.modules
import cellbox_nettest
(preloaded, cellbox_nettest.GREETING, open('/app/hello.txt').read(),
 sorted(os.listdir('/opt/data')), open('/opt/data/deep/two.txt').read(),
 os.environ.get('GREETING'), os.getcwd())"""))
        assert seen == (True, internet.wheel_greeting, "hello from the context\n",
                        ["deep", "one.txt"], "2\n", "hi there", "/app")
    finally:
        v1.remove(sid)
    assert delete_template(daemon, "withnettest").status_code == 204
    assert not template_exists(daemon, "withnettest")


def cellbox(daemon, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CELLBOX_")}
    env.update(CELLBOX_URL=daemon.origin, CELLBOX_TOKEN=daemon.token)
    return subprocess.run([cli_binary(), *args], capture_output=True, text=True, env=env,
                          timeout=TIMEOUT, stdin=subprocess.DEVNULL)


def test_the_cli_prints_each_step_and_exits_0_or_1(daemon, tmp_path):
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "note.txt").write_text("a note\n")
    (tmp_path / "Dockerfile").write_text("FROM cellbox\nCOPY note.txt /app/\n"
                                         "RUN cat /app/note.txt && echo cli-build-ran\n")
    r = cellbox(daemon, "template", "build", "clitpl", "-f", str(tmp_path / "Dockerfile"),
                str(tmp_path / "ctx"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Step 1/3 : FROM cellbox" in r.stdout
    assert "Step 2/3 : COPY note.txt /app/" in r.stdout
    assert "Step 3/3 : RUN cat /app/note.txt && echo cli-build-ran" in r.stdout
    assert "a note\ncli-build-ran\n" in r.stdout
    assert "built template clitpl" in r.stdout

    (tmp_path / "Failing").write_text("FROM cellbox\nRUN echo about-to-fail && exit 7\n")
    r = cellbox(daemon, "template", "build", "clifail", "-f", str(tmp_path / "Failing"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "about-to-fail" in r.stdout
    assert "step 2 (line 2: RUN echo about-to-fail && exit 7) failed: the step exited with status 7" in r.stderr
    assert not template_exists(daemon, "clifail")
    assert delete_template(daemon, "clitpl").status_code == 204


def test_a_failing_run_names_step_line_exit_code_and_output_and_leaves_nothing(daemon):
    before_layers = layer_dirs(daemon)
    dockerfile = ("FROM cellbox\nRUN echo kept-layer > /usr/local/share/kept.txt\n"
                  "RUN echo partial > /usr/local/share/partial.txt && echo before-failing && exit 3\n")
    build = post_build(daemon, "failing", dockerfile)
    assert build.status == 200
    error = build.last
    assert error["type"] == "error", build
    assert (error["step"], error["line"], error["exit_code"]) == (3, 3, 3)
    assert error["instruction"] == ("RUN echo partial > /usr/local/share/partial.txt && echo "
                                    "before-failing && exit 3")
    assert "status 3" in error["message"]
    assert "before-failing" in error["output"] and "before-failing" in build.output(step=3)
    assert not template_exists(daemon, "failing")
    # The step before it is kept (a cache for the next try); the failed one left no layer.
    new_layers = layer_dirs(daemon) - before_layers
    assert len(new_layers) <= 1
    for key in new_layers:
        assert not os.path.exists(os.path.join(daemon.data_dir, "templates", "layers", key,
                                               "usr", "local", "share", "partial.txt"))
    wait_until(lambda: nothing_left(daemon, "failing"), timeout=30,
               message="the failed build's leftovers to go")


@pytest.mark.parametrize("dockerfile, context, named", [
    ("FROM cellbox\nRUN true\nFROBNICATE now\n", None, "line 3: unknown instruction \"FROBNICATE now\""),
    ("FROM cellbox\nCMD [\"python3\"]\n", None, "line 2: CMD is not supported by cellbox"),
    ("FROM cellbox\nCOPY missing.txt /app/\n", {"present.txt": "x"}, "COPY source \"missing.txt\" is not in the build context"),
    ("FROM cellbox\nCOPY ../outside /app/\n", {"present.txt": "x"}, "leaves the build context"),
    ("FROM cellbox\nCOPY present.txt /etc/passwd\n", {"present.txt": "x"}, "line 2: COPY present.txt /etc/passwd"),
    ("FROM no-such-template\n", None, "line 1: FROM no-such-template: no such template"),
    ("FROM bash\nRUN true\n", None, "line 1: FROM bash: bash is a language, not a template"),
])
def test_errors_known_before_any_step_are_400_naming_the_line(daemon, dockerfile, context, named):
    build = post_build(daemon, "refused", dockerfile, context=context)
    assert build.status == 400, build
    assert named in build.body["message"], build.body
    assert not template_exists(daemon, "refused")


def test_a_name_clash_is_409_and_replace_builds_over_it(daemon):
    first = post_build(daemon, "clash", "FROM cellbox\nENV V=1\n")
    assert first.last["type"] == "done", first
    again = post_build(daemon, "clash", "FROM cellbox\nENV V=2\n")
    assert again.status == 409 and "clash" in again.body["message"], again
    assert post_build(daemon, "python3", "FROM cellbox\n").status == 409
    replaced = post_build(daemon, "clash", "FROM cellbox\nENV V=2\n", replace=True)
    assert replaced.last["type"] == "done", replaced
    assert replaced.last["template"]["env"] == ["V=2"]
    assert delete_template(daemon, "clash").status_code == 204


def test_apt_get_in_a_run_says_to_install_on_the_host_or_use_pip(daemon):
    build = post_build(daemon, "withapt", "FROM cellbox\nRUN apt-get install -y cowsay\n")
    assert build.last["type"] == "error", build
    assert "apt-get cannot run in a cellbox build" in build.last["message"]
    assert "pip or npm" in build.last["message"]
    assert not template_exists(daemon, "withapt")


def test_a_preload_module_that_cannot_be_imported_fails_the_build(daemon):
    build = post_build(daemon, "badpreload", "FROM cellbox\nRUN true\n", preload="no_such_module_x")
    assert build.last["type"] == "error", build
    assert "preload: module no_such_module_x cannot be imported" in build.last["output"]
    assert not template_exists(daemon, "badpreload")


def test_a_rebuild_reuses_every_step_and_a_change_invalidates_from_its_step(daemon, internet):
    dockerfile = (f"FROM cellbox\nRUN pip install --index-url http://{INDEX_ADDRESS}/simple "
                  f"--trusted-host {INDEX_ADDRESS} cellbox-nettest\n"
                  "COPY a.txt /app/a.txt\nRUN echo marker-of-the-last-run\n")
    first = post_build(daemon, "cached", dockerfile, context={"a.txt": "one"})
    assert first.last["type"] == "done", first
    assert "marker-of-the-last-run" in first.output()
    asked = index_requests(internet)

    # The same Dockerfile again (replace, and under another name): every step reused, no RUN run.
    for name, fields in (("cached", {"replace": True}), ("cached-too", {})):
        again = post_build(daemon, name, dockerfile, context={"a.txt": "one"}, **fields)
        assert again.last["type"] == "done", again
        assert all(s["cached"] for s in again.steps()), again.steps()
        assert again.last["cached_steps"] == 3
        assert again.of("output") == []
        assert again.last["template"]["layers"] == first.last["template"]["layers"]
    assert index_requests(internet) == asked

    # A changed last step: the earlier ones reused.
    changed = post_build(daemon, "cached", dockerfile.replace("marker-of-the-last-run", "changed"),
                         context={"a.txt": "one"}, replace=True)
    assert [s["cached"] for s in changed.steps()] == [True, True, True, False], changed
    assert "changed" in changed.output(step=4)
    # A changed COPY source: from that step on, nothing reused.
    recopied = post_build(daemon, "cached", dockerfile, context={"a.txt": "two"}, replace=True)
    assert [s["cached"] for s in recopied.steps()] == [True, True, False, False], recopied
    assert index_requests(internet) == asked
    for name in ("cached", "cached-too"):
        assert delete_template(daemon, name).status_code == 204


def test_other_sandboxes_are_served_during_a_run_and_a_client_that_leaves_stops_the_build(daemon, v1):
    sid = v1.create()["id"]
    sleeping = threading.Event()
    results = {}

    def on_event(event, response):
        if event["type"] == "output" and "sleeping-now" in event["text"]:
            sleeping.set()
            results["answer"] = v1.value(sid, "6 * 7")  # while the RUN still sleeps
            return False  # then the client goes away: the build must stop
        return True

    def on_event_and_clash(event, response):
        if event["type"] == "output" and "sleeping-now" in event["text"]:
            # One build per name: a second one is refused while the first runs.
            results["second"] = post_build(daemon, "sleeper", "FROM cellbox\n")
        return on_event(event, response)

    build = post_build(daemon, "sleeper", "FROM cellbox\nRUN echo sleeping-now && sleep 600\n",
                       stream_callback=on_event_and_clash)
    assert sleeping.is_set(), build
    assert results["answer"] == "42"
    second = results["second"]
    assert second.status == 409 and "a build of template sleeper is running" in second.body["message"]
    assert not any(e["type"] in ("done", "error") or (e["type"] == "step_done" and e["step"] == 2)
                   for e in build.events), build
    v1.remove(sid)
    wait_until(lambda: nothing_left(daemon, "sleeper"), timeout=60,
               message="the abandoned build's leftovers to go")
    assert not template_exists(daemon, "sleeper")
    assert "template build sleeper abandoned" in daemon.log_text()


def test_a_step_past_its_time_limit_is_stopped_naming_the_limit(daemon):
    build = post_build(daemon, "slow", "FROM cellbox\nRUN echo started && sleep 600\n",
                       step_timeout_s=1)
    assert build.last["type"] == "error", build
    assert "ran past its time limit of 1 s" in build.last["message"]
    assert "started" in build.last["output"]
    assert not template_exists(daemon, "slow")
    wait_until(lambda: nothing_left(daemon, "slow"), timeout=30, message="the slow build's leftovers")


def test_arg_build_args_and_add_of_a_local_tar(daemon, v1):
    import io
    import tarfile
    packed = io.BytesIO()
    with tarfile.open(fileobj=packed, mode="w:gz") as tar:
        data = b"unpacked by ADD\n"
        info = tarfile.TarInfo("inner/file.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    dockerfile = ("ARG WHO=nobody\nFROM cellbox\nARG WHO\nARG PLACE=/srv/things\n"
                  "ENV WHO_SAID=${WHO}\nADD bundle.tar.gz $PLACE/\n"
                  "RUN echo \"who=$WHO place=$PLACE\" && cat $PLACE/inner/file.txt\n")
    build = post_build(daemon, "withargs", dockerfile, context={"bundle.tar.gz": packed.getvalue()},
                       build_args={"WHO": "the test"})
    assert build.last["type"] == "done", build
    assert "who=the test place=/srv/things\nunpacked by ADD\n" in build.output()
    assert "WHO_SAID=the test" in build.last["template"]["env"]
    assert delete_template(daemon, "withargs").status_code == 204


def sleeping_build(daemon, name, when_sleeping):
    """A build whose RUN sleeps; `when_sleeping()` is called once it does (from the reader)."""
    def on_event(event, response):
        if event["type"] == "output" and "sleeping-now" in event["text"]:
            when_sleeping()
        return True
    return post_build(daemon, name, "FROM cellbox\nRUN echo sleeping-now && sleep 600\n",
                      stream_callback=on_event)


def test_a_stop_during_a_build_tells_its_client_and_leaves_nothing(make_daemon):
    d = make_daemon(args=["--pool-size", "0"])
    build = sleeping_build(d, "interrupted", lambda: os.kill(d.proc.pid, signal.SIGTERM))
    assert build.last["type"] != "done", build
    d.proc.wait(timeout=60)
    d.stopped_by_us = True
    # The build ended first, with its error event (the server may stop before it is sent).
    assert "template build interrupted failed: cellboxd is stopping" in d.log_text()
    assert [x for x in leftovers(d) if not x.startswith("sandboxes/")] == []
    assert not any(f"{i}.json" in records(d) for i in build_sandboxes(d, "interrupted"))


def test_a_build_after_a_sigkill_sweeps_what_the_dead_daemon_s_build_left():
    d = Daemon(args=["--pool-size", "0"]).start()
    again = None
    try:
        build = sleeping_build(d, "killed", lambda: os.kill(d.proc.pid, signal.SIGKILL))
        assert build.last["type"] != "done", build
        d.proc.wait(timeout=30)
        d.stopped_by_us = True
        dead_ids = build_sandboxes(d, "killed")
        assert dead_ids
        again = Daemon(args=["--pool-size", "0"])
        again.data_dir = d.data_dir
        again.start(timeout=60)
        after = post_build(again, "afterwards", "FROM cellbox\nRUN true\n")
        assert after.last["type"] == "done", after
        assert not template_exists(again, "killed")
        wait_until(lambda: [x for x in leftovers(again) if not x.startswith("sandboxes/")] == [],
                   timeout=30, message="the dead build's view and layer to go")
        assert not any(f"{i}.json" in records(again) for i in dead_ids)
        assert "which a stopped daemon's build left" in again.log_text()
        assert delete_template(again, "afterwards").status_code == 204
    finally:
        if again is not None:
            finish_or_fail(again)  # first: the dead daemon's check looks at the same data dir
        d.finish()


def test_a_step_s_output_past_8_mib_is_cut_with_a_note(daemon):
    build = post_build(daemon, "loud", "FROM cellbox\nRUN head -c 12000000 /dev/zero | tr '\\0' x\n")
    assert build.last["type"] == "done", build.last
    shown = build.output(step=2)
    assert shown.endswith("[cellbox: this step's output past 8 MiB is not shown]\n")
    # Output is read 64 KiB at a time: the read that crosses 8 MiB is the last one shown.
    assert 8 * 1024 * 1024 <= shown.count("x") < 8 * 1024 * 1024 + 65536
    assert delete_template(daemon, "loud").status_code == 204


def test_a_third_build_at_once_is_503_saying_to_try_later(daemon):
    sleeping = [threading.Event(), threading.Event()]
    release = threading.Event()
    builds = {}

    def run(index):
        def on_event(event, response):
            if event["type"] == "output" and "sleeping-now" in event["text"]:
                sleeping[index].set()
                release.wait(timeout=120)
                return False  # the client leaves: the build is abandoned
            return True
        builds[index] = post_build(daemon, f"busy{index}", "FROM cellbox\nRUN echo sleeping-now && sleep 600\n",
                                   stream_callback=on_event)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    try:
        for event in sleeping:
            assert event.wait(timeout=120)
        third = post_build(daemon, "busy2", "FROM cellbox\n")
        assert third.status == 503, third
        assert "2 template builds are running, the most at once: try again" in third.body["message"]
    finally:
        release.set()
        for t in threads:
            t.join(timeout=120)
    for name in ("busy0", "busy1"):
        wait_until(lambda: nothing_left(daemon, name), timeout=60, message=f"{name}'s leftovers")
    assert post_build(daemon, "busy2", "FROM cellbox\n").last["type"] == "done"
    assert delete_template(daemon, "busy2").status_code == 204


def test_a_build_s_egress_lists_and_no_network_hold_for_its_run_steps(daemon, tmp_path):
    pip = (f"RUN pip install --timeout 3 --retries 0 --index-url http://{INDEX_ADDRESS}/simple "
           f"--trusted-host {INDEX_ADDRESS} cellbox-nettest && echo")
    (tmp_path / "Denied").write_text(f"FROM cellbox\n{pip} denied\n")
    r = cellbox(daemon, "template", "build", "egress-denied", "-f", str(tmp_path / "Denied"),
                "--deny-out", "0.0.0.0/0")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Successfully installed" not in r.stdout
    assert "No matching distribution found for cellbox-nettest" in r.stdout  # the index unreached
    assert not template_exists(daemon, "egress-denied")

    offline = post_build(daemon, "egress-offline", f"FROM cellbox\n{pip} offline\n", network=False)
    assert offline.last["type"] == "error", offline
    assert "Successfully installed" not in offline.output()
    assert "this sandbox has no network, so pip could not reach" in offline.output()

    (tmp_path / "Allowed").write_text(f"FROM cellbox\n{pip} allowed\n")
    r = cellbox(daemon, "template", "build", "egress-allowed", "-f", str(tmp_path / "Allowed"),
                "--allow-out", INDEX_ADDRESS, "--deny-out", "0.0.0.0/0")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Successfully installed cellbox-nettest" in r.stdout
    assert delete_template(daemon, "egress-allowed").status_code == 204
