"""The operator's per-sandbox network limits (cellboxd --network-max-connections,
--network-bandwidth; sandbox/network.c's network_limit_sandboxes): a sandbox holding its count of
connections is refused one more at once, while another sandbox opens its own; a closed one makes
room; the rate limit is in the table each way and a download under it completes whole. (How fast
a download runs under the limit is a figure for `make bench`, not an assertion here.)

The outside host is the test internet's web server (helpers/test_internet.py, 203.0.113.10)."""
import os
import subprocess

import pytest

from helpers.daemon import Daemon, finish_or_fail
from helpers.network_ranges import sandbox_range
from helpers.test_internet import WEB_ADDRESS, small_internet
from helpers.v1 import V1

pytestmark = pytest.mark.cellbox_only

MAX_CONNECTIONS = 3
BIG_FILE_BYTES = 1024 * 1024

OPEN = """
import socket
try:
    HELD
except NameError:
    HELD = []
def _open():
    s = socket.socket(); s.settimeout(5)
    try:
        s.connect((%r, 80)); HELD.append(s); return 'connected'
    except socket.timeout:
        s.close(); return 'timeout'
    except OSError as e:
        s.close(); return e.errno
[_open() for _ in range({count})]
""" % WEB_ADDRESS

CLOSE_ONE_AND_RETRY = """
import time
HELD.pop().close()
_outcome = None
for _ in range(20):  # bounded: the closed connection leaves the count once it is fully closed
    _outcome = _open()
    if _outcome == 'connected':
        break
    time.sleep(0.5)
_outcome
"""


def block_of(daemon):
    with open(os.path.join(daemon.data_dir, "uid-block")) as f:
        return int(f.read().split()[0])


@pytest.fixture(scope="module")
def internet():
    with small_internet(big_file_bytes=BIG_FILE_BYTES) as world:
        yield world


@pytest.fixture(scope="module")
def v1_limited(internet):
    d = Daemon(args=["--allow-network", "--network-range", sandbox_range(4),
                     "--network-max-connections", str(MAX_CONNECTIONS), "--network-bandwidth", "1M"])
    d.start()
    client = V1(d)
    try:
        yield client
    finally:
        client.cleanup()
        finish_or_fail(d)


def test_one_connection_over_the_count_is_refused_and_a_closed_one_makes_room(v1_limited):
    first = v1_limited.create(timeout_s=0, network=True)["id"]
    second = v1_limited.create(timeout_s=0, network=True)["id"]
    opened = eval(v1_limited.value(first, OPEN.format(count=MAX_CONNECTIONS + 1)))
    assert opened[:MAX_CONNECTIONS] == ["connected"] * MAX_CONNECTIONS, opened
    assert opened[MAX_CONNECTIONS] not in ("connected", "timeout"), opened  # refused at once
    # The count is each sandbox's own: the second opens its full count meanwhile.
    assert eval(v1_limited.value(second, OPEN.format(count=MAX_CONNECTIONS))) == ["connected"] * MAX_CONNECTIONS
    assert v1_limited.value(first, CLOSE_ONE_AND_RETRY) == repr("connected")
    # Closed before the delete: a dead sandbox's connections still open on the far side would
    # count against the next sandbox given its address (docs/security.md says so).
    for sid in (first, second):
        v1_limited.value(sid, "[s.close() for s in HELD]\nlen(HELD)")
        v1_limited.remove(sid)


def test_the_rate_limit_holds_each_way_and_a_download_completes(v1_limited):
    block = block_of(v1_limited.daemon)
    chains = {name: subprocess.run(["nft", "list", "chain", "inet", f"cellbox_{block}", name],
                                   capture_output=True, text=True, timeout=20).stdout
              for name in ("limits_out", "limits_in")}
    assert "ip saddr limit rate over 1 mbytes/second" in chains["limits_out"], chains
    assert "ip daddr limit rate over 1 mbytes/second" in chains["limits_in"], chains
    sid = v1_limited.create(timeout_s=0, network=True)["id"]
    size = v1_limited.value(sid, f"""
import urllib.request
len(urllib.request.urlopen('http://{WEB_ADDRESS}/big.bin', timeout=60).read())
""", timeout=120)
    assert size == str(BIG_FILE_BYTES)
    v1_limited.remove(sid)
