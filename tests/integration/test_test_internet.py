"""The tests' own small internet (helpers/test_internet.py) works, seen from a plain network
namespace standing in for a networked sandbox, and leaves nothing behind.

Traffic here goes only to addresses in 198.51.100.0/24 and 203.0.113.0/24 that the fixture made
in its own namespaces on this machine.
"""
import hashlib
import os
import subprocess

import pytest

from helpers import test_internet as world

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces and veths need root")

FETCH = ("import sys, urllib.request\n"
         "body = urllib.request.urlopen(sys.argv[1], timeout=30).read()\n"
         "import hashlib; print(len(body), hashlib.sha256(body).hexdigest())\n")


# One internet per test (it builds in about a second): the teardown tests below build their own,
# and a second internet cannot live beside the first.
@pytest.fixture
def internet():
    with world.small_internet(big_file_bytes=8 * 1024 * 1024) as built:
        yield built


@pytest.fixture
def sandbox(internet):
    with world.stand_in_sandbox(internet) as stand_in:
        yield stand_in


def fetched(sandbox, url):
    """(length, sha256) of the body at url, fetched from inside the stand-in sandbox."""
    done = sandbox.run(["/usr/bin/python3", "-c", FETCH, url])
    assert done.returncode == 0, done.stderr
    length, digest = done.stdout.split()
    return int(length), digest


def pip(sandbox, tmp_path, *args):
    """pip from inside the stand-in: no config, cache or version check from the host."""
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(tmp_path)}
    return sandbox.run(["/usr/bin/python3", "-m", "pip", "--isolated", "--no-cache-dir",
                        "--disable-pip-version-check", *args], env=env, timeout=180)


def test_web_server_serves_its_page_and_big_file_by_address_and_by_name(internet, sandbox):
    assert fetched(sandbox, f"{internet.web_url}/index.html")[0] > 0
    with open(os.path.join(internet.workdir, "web", "big.bin"), "rb") as f:
        expected = hashlib.sha256(f.read()).hexdigest()
    assert fetched(sandbox, internet.big_file_url) == (internet.big_file_bytes, expected)
    assert fetched(sandbox, "http://web.test/big.bin") == (internet.big_file_bytes, expected)


def test_dns_server_answers_its_names_and_no_other(internet, sandbox):
    for name, address in internet.dns_names.items():
        done = sandbox.run(["getent", "ahostsv4", name])
        assert done.returncode == 0, f"{name}: {done.stderr}"
        assert {line.split()[0] for line in done.stdout.splitlines()} == {address}, name
    # No upstream: a real name is not resolved (nothing leaves this machine).
    assert sandbox.run(["getent", "ahostsv4", "example.com"]).returncode != 0


def test_pip_downloads_and_installs_the_wheel_from_the_index(internet, sandbox, tmp_path):
    for index_url, host in ((internet.index_url, world.INDEX_ADDRESS), ("http://pkg.test/simple", "pkg.test")):
        dest = tmp_path / f"download-{host}"
        done = pip(sandbox, tmp_path, "download", "--no-deps", "--index-url", index_url,
                   "--trusted-host", host, "--dest", str(dest), internet.wheel_project)
        assert done.returncode == 0, done.stdout + done.stderr
        assert os.listdir(dest) == [internet.wheel_filename]

    target = tmp_path / "target"
    done = pip(sandbox, tmp_path, "install", "--no-deps", "--index-url", internet.index_url,
               "--trusted-host", world.INDEX_ADDRESS, "--target", str(target), internet.wheel_project)
    assert done.returncode == 0, done.stdout + done.stderr
    imported = subprocess.run(["/usr/bin/python3", "-c", f"import {internet.wheel_package} as p; print(p.GREETING)"],
                              capture_output=True, text=True, timeout=60, env={"PYTHONPATH": str(target)})
    assert imported.stdout.strip() == internet.wheel_greeting, imported.stderr


def test_neither_namespace_has_a_route_beyond_the_test_ranges(internet, sandbox):
    # `ip route get` asks the routing table and sends nothing: the machine's own gateway
    # (192.0.2.1) and any real address are unreachable from the internet and the stand-in.
    for namespace in (internet.namespace, sandbox.namespace):
        for address in ("192.0.2.1", "8.8.8.8"):
            done = subprocess.run(["ip", "-n", namespace, "route", "get", address],
                                  capture_output=True, text=True, timeout=30)
            assert done.returncode != 0 and "unreachable" in done.stderr, (namespace, address, done.stdout)
    assert "via" in world.ip("-n", sandbox.namespace, "route", "get", world.WEB_ADDRESS)


def namespace_inode(name):
    return os.stat(f"/run/netns/{name}").st_ino


def processes_in_network_namespaces(inodes):
    """Pids of processes on the host whose network namespace is one of `inodes`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}/ns/net").st_ino in inodes:
                    found.append(int(entry))
            except OSError:
                continue  # gone meanwhile, or not ours to read
    return found


def host_state(prefix):
    """What the internet may touch on the host: names with its prefix, routes into the test
    ranges, the forwarding switches."""
    return {"namespaces": sorted(n for n in world.namespaces() if n.startswith(prefix)),
            "links": sorted(n for n in world.host_links() if n.startswith(prefix)),
            "routes": world.routes_into(), "forwarding": world.forwarding_sysctls()}


def test_teardown_leaves_no_namespace_interface_route_or_process():
    prefix = f"cbti{os.getpid()}"
    before = host_state(prefix)
    with world.small_internet(big_file_bytes=1024 * 1024) as built:
        with world.stand_in_sandbox(built) as stand_in:
            during = host_state(prefix)
            inodes = {namespace_inode(built.namespace), namespace_inode(stand_in.namespace)}
            servers = [pid for pid, _ in built.server_pids]
            assert len(processes_in_network_namespaces(inodes)) >= 3
    after = host_state(prefix)
    assert during["namespaces"] == sorted([built.namespace, stand_in.namespace])
    assert len(during["routes"]) > len(before["routes"])
    assert after == before
    assert processes_in_network_namespaces(inodes) == []
    assert [pid for pid in servers if world.pid_alive(pid)] == []
    assert not os.path.exists(f"/etc/netns/{stand_in.namespace}")


def test_teardown_refuses_to_pass_when_something_of_its_own_is_left():
    leaked = None
    try:
        with pytest.raises(AssertionError, match="left"):
            with world.small_internet(big_file_bytes=1024 * 1024) as built:
                leaked = f"{built.prefix}x"
                world.ip("link", "add", leaked, "type", "veth", "peer", "name", f"{built.prefix}y")
    finally:
        if leaked:
            world.ip("link", "delete", leaked, check=False)
    assert world.leftovers(f"cbti{os.getpid()}") == []
