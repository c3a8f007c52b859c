"""A networked sandbox and its egress lists through E2B's official SDK, unchanged
(tests/clients/node/e2b_network.mjs), against cellboxd with --allow-network and the tests' own
small internet (helpers/test_internet.py: a web server at 203.0.113.10, a package index at
203.0.113.20 serving the wheel cellbox-nettest; nothing else is ever addressed):

- Sandbox.create({network: {allowOut: [index], denyOut: ['0.0.0.0/0']}}) reaches the index and
  not the web server; getInfo reads the lists back;
- the seed walkthrough's commands.run('pip install ...') installs from that index, and runCode
  imports the package;
- updateNetwork replaces the lists ({} clears them; allowInternetAccess: false denies all but
  allowOut), in effect at once;
- allowInternetAccess: false alone is no network at all (updateNetwork refused); beside lists it
  denies everything else; allowInternetAccess: true reaches both hosts.
"""
import pytest

from helpers.daemon import Daemon, serve
from helpers.node_clients import assert_every_step_passed, passed_step, run_e2b_script
from helpers.network_ranges import sandbox_range
from helpers.test_internet import DNS_ADDRESS, INDEX_ADDRESS, WEB_ADDRESS, small_internet

pytestmark = pytest.mark.cellbox_only  # Jupyter Server has no E2B API

TIMEOUT = 300
# The sandboxes' resolver forwards to the test internet's DNS server; its names live in the
# documentation ranges, which the resolver's rebind guard refuses unless told they may.
DAEMON_ARGS = ["--allow-network", "--network-range", sandbox_range(), "--network-dns-upstream", DNS_ADDRESS,
               "--network-dns-rebind-ok", "test"]


@pytest.fixture(scope="module")
def internet():
    with small_internet(big_file_bytes=1024 * 1024) as built:
        yield built


@pytest.fixture(scope="module")
def daemon(internet):
    yield from serve(Daemon(args=DAEMON_ARGS).start())


@pytest.fixture(scope="module")
def sdk_run(daemon, internet):
    return run_e2b_script(daemon, "e2b_network.mjs", TIMEOUT, env={
        "CELLBOX_WEB": WEB_ADDRESS, "CELLBOX_INDEX": INDEX_ADDRESS,
        "CELLBOX_PROJECT": internet.wheel_project, "CELLBOX_PACKAGE": internet.wheel_package})


def test_every_step_reported_and_passed(sdk_run):
    proc, steps, detail = sdk_run
    assert_every_step_passed(proc, steps, detail, [
        "create_with_lists", "get_info", "commands_pip_install_then_import", "update_network_flips",
        "update_network_clears", "update_network_internet_off", "internet_false_alone_has_no_network",
        "internet_false_with_lists_denies_the_rest", "internet_true_reaches_both",
        "domains_allow_out_then_update", "kill"])


def test_create_with_lists_reaches_only_allow_out(sdk_run):
    _, steps, detail = sdk_run
    assert passed_step(steps, detail, "create_with_lists")["reached"] == {"web": False, "index": True}
    got = passed_step(steps, detail, "get_info")
    assert got["network"]["allowOut"] == [INDEX_ADDRESS] and got["network"]["denyOut"] == ["0.0.0.0/0"]
    # everything but allowOut denied reads as E2B's allowInternetAccess: false
    assert got["allowInternetAccess"] is False, detail


def test_pip_install_from_a_command_then_import_in_the_kernel(sdk_run, internet):
    _, steps, detail = sdk_run
    step = passed_step(steps, detail, "commands_pip_install_then_import")
    assert step["exit_code"] == 0 and "Successfully installed" in step["last_line"], detail
    assert step["text"] == repr(internet.wheel_greeting), detail


def test_update_network_replaces_the_lists_at_once(sdk_run):
    _, steps, detail = sdk_run
    assert passed_step(steps, detail, "update_network_flips")["reached"] == {"web": True, "index": False}
    assert passed_step(steps, detail, "update_network_clears")["reached"] == {"web": True, "index": True}
    off = passed_step(steps, detail, "update_network_internet_off")
    assert off["reached"] == {"web": True, "index": False} and off["allowInternetAccess"] is False


def test_allow_internet_access_false(sdk_run):
    _, steps, detail = sdk_run
    alone = passed_step(steps, detail, "internet_false_alone_has_no_network")
    assert alone["reached"] == {"web": False, "index": False} and alone["network"] is None
    assert "has no network" in alone["refused"], detail
    listed = passed_step(steps, detail, "internet_false_with_lists_denies_the_rest")
    assert listed["reached"] == {"web": True, "index": False}, detail


def test_allow_internet_access_true_reaches_everything_outside(sdk_run):
    _, steps, detail = sdk_run
    step = passed_step(steps, detail, "internet_true_reaches_both")
    assert step["reached"] == {"web": True, "index": True} and step["allowInternetAccess"] is True


def test_allow_out_by_domain_name_holds_and_follows_update_network(sdk_run):
    _, steps, detail = sdk_run
    step = passed_step(steps, detail, "domains_allow_out_then_update")
    assert step["before"] == {"web": True, "index": False}, detail
    assert step["after"] == {"web": False, "index": True}, detail
    assert step["network"]["allowOut"] == ["pkg.test"], detail
