"""pip inside a sandbox, as E2B's walkthrough types it (`commands.run("pip install cowsay")`).

- Without a network, `pip install NAME` fails at once (no retries) with a non-zero exit and a
  last line from cellbox that says the sandbox has no network and what to do instead; `pip` and
  `python3 -m pip` say the same, and nothing mentions PEP 668's externally-managed-environment.
- A wheel uploaded into the sandbox installs offline into the user's site ($HOME/.local, in the
  workspace), and the kernel that was already running imports it without a restart, though
  ~/.local did not exist when it started.
- With a network (`"network": true`, the daemon started with --allow-network), the same
  command installs from an index: here one the test serves from an outside host it makes.
- The host's /usr is untouched throughout.
"""
import contextlib
import os

import pytest

from helpers import wheels
from helpers.outside_host import outside_host
from helpers.v1 import V1

PIP_TIMEOUT = 120  # seconds: a bound on each request, so a retrying pip fails the test, not hangs
PACKAGE = "cellbox_pip_probe"
VERSION = "1.0"
WHEEL_NAME = wheels.wheel_name(PACKAGE, VERSION)
COMMAND = "cellbox-pip-probe"  # the wheel's console script
NOTE = "cellbox: this sandbox has no network, so pip could not reach"
HOST_SITES = ("/usr/lib/python3/dist-packages", "/usr/local/lib/python3.11/dist-packages",
              "/usr/lib/python3.11/site-packages")


def build_wheel(greeting, pth_line=None):
    return wheels.build_wheel(PACKAGE, VERSION, greeting, COMMAND, pth_line)


def host_site_listing():
    """What the host's system site-packages hold (names only): compared before and after."""
    listing = {}
    for directory in HOST_SITES:
        with contextlib.suppress(FileNotFoundError):
            listing[directory] = sorted(os.listdir(directory))
    return listing


def assert_not_on_host():
    for directory in HOST_SITES:
        assert not os.path.exists(os.path.join(directory, PACKAGE)), directory


@pytest.fixture(scope="module")
def v1(daemon):
    client = V1(daemon)
    yield client
    client.cleanup()


@pytest.fixture
def box(v1):
    model = v1.create(timeout_s=0)
    yield model
    v1.remove(model["id"])


def run(v1, box, cmd):
    events = v1.command(box["id"], cmd, timeout=PIP_TIMEOUT)
    return events, events[-1]["exit_code"]


def last_line(text):
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


@pytest.mark.parametrize("pip", ["pip", "pip3", "python3 -m pip", "pip install --user"])
def test_install_by_name_without_network_fails_fast_naming_the_network(v1, box, pip):
    before = host_site_listing()
    cmd = pip if pip.endswith("--user") else f"{pip} install"
    events, exit_code = run(v1, box, f"{cmd} cowsay")
    output = events.stdout + events.stderr
    assert exit_code != 0, output
    assert "externally-managed-environment" not in output, output
    # No retry loop: pip's urllib3 says "Retrying (Retry(total=..." before each retry.
    assert "Retrying" not in output, output
    note = last_line(events.stderr)
    assert note.startswith(NOTE), output
    assert "pypi.org" in note and "pip install --no-index" in note and "--allow-network" in note
    assert host_site_listing() == before


def test_the_note_is_pips_alone(v1, box):
    """Other programs run as before: a lookup that fails in plain python3 prints no note."""
    events, exit_code = run(v1, box, "python3 -c 'import socket; socket.getaddrinfo(\"pypi.org\", 443)'")
    assert exit_code != 0 and "gaierror" in events.stderr, events
    assert NOTE not in events.stdout + events.stderr


def test_uploaded_wheel_installs_offline_and_imports_in_the_running_kernel(v1, box, daemon):
    sid = box["id"]
    # The kernel runs (and has imported) before ~/.local exists.
    assert v1.value(sid, "import os, site; os.path.exists(os.path.expanduser('~/.local'))") == "False"
    before = host_site_listing()
    v1.write(sid, WHEEL_NAME, build_wheel("hello from an uploaded wheel"))
    events, exit_code = run(v1, box, f"pip install --no-index ./{WHEEL_NAME}")
    assert exit_code == 0, events
    assert f"Successfully installed {PACKAGE.replace('_', '-')}-{VERSION}" in events.stdout, events
    assert NOTE not in events.stdout + events.stderr
    # Into the user's site, in the workspace, as the sandbox's own files.
    workspace = daemon.workspace(sid)
    site_dir = os.path.join(workspace, ".local", "lib", "python3.11", "site-packages")
    assert os.path.isfile(os.path.join(site_dir, PACKAGE, "__init__.py")), os.listdir(workspace)
    # The same kernel imports it, with no restart.
    assert v1.value(sid, f"import {PACKAGE}; {PACKAGE}.GREETING") == "'hello from an uploaded wheel'"
    assert v1.value(sid, f"{PACKAGE}.__file__").startswith("'/home/user/.local/lib/python3.11/site-packages/")
    assert_not_on_host()
    assert host_site_listing() == before


def test_the_wheels_command_is_on_path_everywhere(v1, box):
    """pip puts a package's console scripts in ~/.local/bin, which comes first on PATH in
    commands (bash -c), login shells (E2B's bash -l -c, whose PATH /etc/profile resets) and the
    kernel, so pip has no "not on PATH" warning to give."""
    sid = box["id"]
    v1.write(sid, WHEEL_NAME, build_wheel("a command"))
    events, exit_code = run(v1, box, f"pip install --no-index ./{WHEEL_NAME}")
    assert exit_code == 0 and "not on PATH" not in events.stdout + events.stderr, events
    for shell in (COMMAND, f"bash -l -c {COMMAND}"):
        events, exit_code = run(v1, box, shell)
        assert (exit_code, events.stdout) == (0, "a command\n"), (shell, events)
    events = v1.execute(sid, f"!{COMMAND}")
    assert not events.errors and events.stdout == "a command\n", events


def test_an_exec_kernel_imports_it_too(make_daemon):
    """A kernel exec'd in its sandbox (--zygote=false) started its own Python there, which left
    the user site out because it did not exist yet: it imports the wheel all the same."""
    v1 = V1(make_daemon(args=["--zygote=false"]))
    try:
        box = v1.create(timeout_s=0)
        assert v1.value(box["id"], "import sys; any('.local' in p for p in sys.path)") == "True"
        v1.write(box["id"], WHEEL_NAME, build_wheel("exec"))
        events, exit_code = run(v1, box, f"pip install --no-index ./{WHEEL_NAME}")
        assert exit_code == 0, events
        assert v1.value(box["id"], f"import {PACKAGE}; {PACKAGE}.GREETING") == "'exec'"
    finally:
        v1.cleanup()
    assert_not_on_host()


def test_a_pth_file_pip_installs_runs_in_the_running_kernel(v1, box):
    """A .pth file in the user site runs once, as it would at startup, when the kernel next
    looks there for a module."""
    sid = box["id"]
    v1.write(sid, WHEEL_NAME, build_wheel("pth", "import os; os.environ['CELLBOX_PTH_RUNS'] = "
                                                 "os.environ.get('CELLBOX_PTH_RUNS', '') + 'x'"))
    events, exit_code = run(v1, box, f"pip install --no-index ./{WHEEL_NAME}")
    assert exit_code == 0, events
    assert v1.value(sid, f"import {PACKAGE}, os; os.environ.get('CELLBOX_PTH_RUNS')") == "'x'"
    events = v1.execute(sid, "try:\n    import no_such_module_here\nexcept ImportError:\n    pass\n"
                             "import os; os.environ.get('CELLBOX_PTH_RUNS')")
    assert events.main_result.get("text") == "'x'", events  # once, not at every lookup


def test_python3_m_pip_and_user_installs_alike(v1, box):
    sid = box["id"]
    v1.write(sid, WHEEL_NAME, build_wheel("user"))
    events, exit_code = run(v1, box, f"python3 -m pip install --user --no-index ./{WHEEL_NAME}")
    assert exit_code == 0, events
    events, exit_code = run(v1, box, f"python3 -c 'import {PACKAGE}; print({PACKAGE}.__file__)'")
    assert (exit_code, events.stdout.startswith("/home/user/.local/")) == (0, True), events
    assert_not_on_host()


def test_pip_inside_the_kernel_installs_for_the_kernel(v1, box):
    """IPython's %pip runs `python3 -m pip` in a child process: the wheel lands in the user site
    and the next line of the same cell imports it."""
    sid = box["id"]
    v1.write(sid, WHEEL_NAME, build_wheel("from %pip"))
    events = v1.execute(sid, f"%pip install --no-index ./{WHEEL_NAME}\n"
                             f"import {PACKAGE}\n{PACKAGE}.GREETING", timeout=PIP_TIMEOUT)
    assert not events.errors, events
    assert events.main_result.get("text") == "'from %pip'", events
    assert_not_on_host()


def test_with_a_network_the_same_command_installs_from_the_index(make_daemon):
    """A PEP 503 index on an outside host the test makes (a network namespace with an address
    of 203.0.113.0/24, helpers/outside_host.py), which a sandbox with a network reaches through
    its own interface; the wheel differs from the offline tests' so the import proves where it
    came from."""
    project = f"simple/{PACKAGE.replace('_', '-')}"
    files = {f"{project}/{WHEEL_NAME}": build_wheel("from the index"),
             f"{project}/index.html": f'<a href="{WHEEL_NAME}">{WHEEL_NAME}</a>\n'.encode()}
    before = host_site_listing()
    with outside_host(files) as index_host:
        daemon = make_daemon(args=["--allow-network"])
        v1 = V1(daemon)
        try:
            box = v1.create(timeout_s=0, network=True)
            index = f"{index_host.url}simple/"
            # Plain HTTP to a host that is not localhost: pip needs it named trusted.
            events, exit_code = run(v1, box, f"pip install --index-url {index} "
                                             f"--trusted-host {index_host.address} {PACKAGE}")
            output = events.stdout + events.stderr
            assert exit_code == 0, output
            assert "externally-managed-environment" not in output and NOTE not in output, output
            assert v1.value(box["id"], f"import {PACKAGE}; {PACKAGE}.GREETING") == "'from the index'"
        finally:
            v1.cleanup()
    assert_not_on_host()
    assert host_site_listing() == before
