"""POST /v1/sandboxes/{id}/fork: copies of a running sandbox's live Python process, each in a
sandbox of its own (docs/architecture.md, "Checkpoints"; issue 24).

The fork is the kernel's own process image put back into a zygote's clone: what it holds
(arrays, frames, closures, a generator mid-iteration, open files) is there as it was, and from
then on each copy goes its own way. Every fork is a sandbox like any other: its own uid, seccomp,
no_new_privs, and nothing of the original's processes in sight.
"""
import pytest

from helpers.v1 import V1
from helpers.wait import wait_until


@pytest.fixture(scope="module")
def v1(daemon):
    client = V1(daemon)
    # A fork images a zygote's clone: the sandboxes here start once the zygote is ready.
    wait_until(lambda: client.get("api").json()["zygote_ready"], timeout=120,
               message="the zygote")
    yield client
    client.cleanup()


@pytest.fixture
def source(v1):
    model = v1.create(timeout_s=0)
    yield model
    v1.remove(model["id"])


def fork(v1, sid, count=1, expect=201, **body):
    r = v1.post(f"v1/sandboxes/{sid}/fork", json={"count": count, **body}, timeout=120)
    assert r.status_code == expect, f"fork -> {r.status_code} {r.text[:600]}"
    answer = r.json()
    if expect != 201:
        return answer
    assert isinstance(answer, list) and len(answer) == count, answer
    models = []
    for entry in answer:
        assert "sandbox" in entry, f"a fork failed: {entry}"
        v1.created.append(entry["sandbox"]["id"])
        models.append(entry["sandbox"])
    return models


def value(v1, sid, code):
    return v1.value(sid, code)


def stdout(v1, sid, code):
    ev = v1.execute(sid, code)
    assert not ev.errors, ev.errors
    return ev.stdout


def test_a_fork_has_the_variables_and_then_goes_its_own_way(v1, source):
    sid = source["id"]
    v1.execute(sid, "x = 41")
    (copy,) = fork(v1, sid)
    assert copy["id"] != sid and copy["state"] == "running"
    assert copy["restore"]["contexts"][0]["carried"] == "process"
    assert value(v1, copy["id"], "x + 1") == "42"
    v1.execute(copy["id"], "x = 100")
    assert value(v1, sid, "x") == "41"
    assert value(v1, copy["id"], "x") == "100"


LIVE_STATE = r"""
import numpy as np, pandas as pd
big = np.arange(100 * 2**20 // 8, dtype=np.int64)           # ~100 MiB
frame = pd.DataFrame({"a": range(1000), "b": [str(i) for i in range(1000)]})
def make_counter(start):
    count = [start]
    def step():
        count[0] += 1
        return count[0]
    return step
counter = make_counter(10)
counter()
class Fitted:
    def __init__(self, slope): self.slope = slope
    def predict(self, x): return self.slope * x
model = Fitted(2.5)
squares = (i * i for i in range(10))
first = [next(squares), next(squares), next(squares)]
source_file = open("/usr/lib/python3.11/os.py", "rb", buffering=0)  # the offset is the fd's
head = source_file.read(10)
"""


def test_a_fork_holds_arrays_frames_closures_a_generator_and_an_open_file(v1, source):
    sid = source["id"]
    v1.execute(sid, LIVE_STATE)
    expected_next = value(v1, sid, "open('/usr/lib/python3.11/os.py', 'rb').read()[10:30]")
    (copy,) = fork(v1, sid)
    fid = copy["id"]
    assert value(v1, fid, "int(big[-1]), int(big.sum() % 1000003)") == \
        value(v1, sid, "int(big[-1]), int(big.sum() % 1000003)")
    assert value(v1, fid, "frame.shape, frame['b'].iloc[-1]") == "((1000, 2), '999')"
    assert value(v1, fid, "counter()") == "12"
    assert value(v1, fid, "model.predict(4)") == "10.0"
    assert value(v1, fid, "first, next(squares)") == "([0, 1, 4], 9)"  # where it stopped
    assert value(v1, fid, "source_file.read(20)") == expected_next
    # ... and the original's own go on untouched by the fork's steps
    assert value(v1, sid, "counter()") == "12"
    assert value(v1, sid, "next(squares)") == "9"
    report = copy["restore"]["contexts"][0]["report"]
    assert any(f["path"] == "/usr/lib/python3.11/os.py" and f["carried"] and f["offset"] == 10
               for f in report["open_files"]), report


def test_a_fork_is_a_sandbox_of_its_own(v1, source):
    sid = source["id"]
    v1.execute(sid, "import os, subprocess\n"
                    "sleeper = subprocess.Popen(['sleep', '300'])\n"
                    "open('/tmp/original-only', 'w').write('o')")
    (copy,) = fork(v1, sid)
    fid = copy["id"]
    status = stdout(v1, fid, "print(open('/proc/self/status').read())")
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    assert fields["Seccomp"].strip() == "2"
    assert fields["NoNewPrivs"].strip() == "1"
    assert fields["CapEff"].strip() == "0000000000000000"
    original_uid = value(v1, sid, "os.getuid()")
    fork_uid = value(v1, fid, "os.getuid()")
    assert fork_uid != original_uid
    assert fields["Uid"].split()[0] == fork_uid
    # nothing of the original's processes, nor of its /tmp
    commands = value(v1, fid, "sorted(open(f'/proc/{p}/cmdline').read() for p in os.listdir('/proc') "
                               "if p.isdigit())")
    assert "sleep" not in commands
    assert value(v1, fid, "os.path.exists('/tmp/original-only')") == "False"
    assert value(v1, sid, "sleeper.poll() is None") == "True"  # the original's child lives on
    not_carried = copy["restore"]["contexts"][0]["report"]["not_carried"]
    assert any(entry["kind"] == "process" for entry in not_carried), not_carried


def test_several_forks_are_independent_of_each_other(v1, source):
    sid = source["id"]
    v1.execute(sid, "items = ['original']")
    copies = fork(v1, sid, count=3)
    assert len({c["id"] for c in copies}) == 3
    for i, c in enumerate(copies):
        v1.execute(c["id"], f"items.append({i})")
    for i, c in enumerate(copies):
        assert value(v1, c["id"], "items") == f"['original', {i}]"
    assert value(v1, sid, "items") == "['original']"
    uids = {value(v1, c["id"], "__import__('os').getuid()") for c in copies}
    assert len(uids) == 3


def test_a_kernel_with_threads_is_not_forked_and_says_why(v1, source):
    sid = source["id"]
    v1.execute(sid, "import threading, time\n"
                    "stop = threading.Event()\n"
                    "worker = threading.Thread(target=stop.wait)\n"
                    "worker.start()")
    answer = fork(v1, sid, expect=409)
    assert "2 threads" in answer["message"], answer
    v1.execute(sid, "stop.set(); worker.join()")
    (copy,) = fork(v1, sid)  # without the thread it can
    assert value(v1, copy["id"], "worker.is_alive()") == "False"
    assert value(v1, sid, "1 + 1") == "2"  # the refusal left the original serving


def test_fork_requests_are_checked(v1, source):
    assert fork(v1, source["id"], count=17, expect=400)["message"]
    assert fork(v1, source["id"], count=0, expect=400)["message"]
    assert "does not exist" in fork(v1, "no-such-sandbox", expect=404)["message"]


def test_a_fork_has_a_copy_of_the_files_and_its_open_file_goes_on_there(v1, source):
    sid = source["id"]
    v1.execute(sid, "with open('/workspace/notes.txt', 'w') as f:\n"
                    "    f.write('0123456789abcdefghij')\n"
                    "notes = open('/workspace/notes.txt')\n"
                    "head = notes.read(10)")
    (copy,) = fork(v1, sid)
    fid = copy["id"]
    assert value(v1, fid, "notes.read(5)") == "'abcde'"  # its own file, at the same offset
    v1.execute(fid, "open('/workspace/notes.txt', 'a').write('+fork')\n"
                    "open('/workspace/fork-only.txt', 'w').write('f')")
    assert value(v1, sid, "open('/workspace/notes.txt').read()") == "'0123456789abcdefghij'"
    assert value(v1, sid, "import os; os.path.exists('/workspace/fork-only.txt')") == "False"
    assert value(v1, sid, "notes.read(5)") == "'abcde'"  # the original's offset is its own


def test_a_library_loaded_after_the_kernel_started_is_in_the_fork(v1, source):
    """_curses links libtinfo, which the zygote never loaded: the fork's clone has nothing at
    that address, so the image carries the library's pages itself."""
    sid = source["id"]
    v1.execute(sid, "import sys\nfresh = '_curses' not in sys.modules\nimport _curses, lzma\n"
                    "packed = lzma.compress(b'cellbox' * 100)")
    assert value(v1, sid, "fresh") == "True"
    (copy,) = fork(v1, sid)
    assert value(v1, copy["id"], "len(lzma.decompress(packed)), _curses.version") == \
        value(v1, sid, "len(lzma.decompress(packed)), _curses.version")


def test_the_sources_other_contexts_start_again_in_the_fork(v1, source):
    """A bash context is exec'd, not a zygote's clone: the fork starts a new one ("restarted")
    beside the imaged default context."""
    sid = source["id"]
    r = v1.post(f"v1/sandboxes/{sid}/contexts", json={"language": "bash"})
    assert r.status_code == 201, r.text
    v1.execute(sid, "x = 1")
    (copy,) = fork(v1, sid)
    carried = {c["language"]: c["carried"] for c in copy["restore"]["contexts"]}
    assert carried == {"python": "process", "bash": "restarted"}, copy["restore"]
    bash = next(c for c in copy["restore"]["contexts"] if c["language"] == "bash")
    listed = v1.get(f"v1/sandboxes/{copy['id']}/contexts").json()
    assert bash["context_id"] in [c["id"] for c in listed]
    ev = v1.execute(copy["id"], "echo $((40 + 2))", language="bash")
    assert ev.stdout.strip() == "42", ev


def test_memory_only_read_is_not_copied_into_the_image(v1, source):
    """Reading untouched memory maps the kernel's one zero page: 2 GiB of it cost the sandbox
    only page tables, and must not cost the daemon 2 GiB of copies."""
    import re
    sid = source["id"]
    v1.execute(sid, "import mmap\n"
                    "region = mmap.mmap(-1, 2 << 30, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)\n"
                    "total = sum(region[i] for i in range(0, 2 << 30, 4096))")
    before = len(re.findall(r"imaged for \d+ fork", v1.daemon.log_text()))
    (copy,) = fork(v1, sid)
    assert value(v1, copy["id"], "total, region[12345], len(region)") == f"(0, 0, {2 << 30})"
    sizes = [int(kib) for kib in re.findall(r"imaged for \d+ fork\(s\): (\d+) KiB", v1.daemon.log_text())]
    assert len(sizes) == before + 1 and sizes[-1] < 512 * 1024, sizes


def test_a_kernel_cannot_forge_the_checkpoint_exchange(v1, source):
    """checkpoint_ready or restored out of turn is ignored; a cellbox frame of another type is a
    protocol violation (the kernel is killed, the daemon and other sandboxes go on)."""
    sid = source["id"]
    send = ("import json, os\n"
            "def frame(message):\n"
            "    body = json.dumps(message).encode()\n"
            "    os.write(3, len(body).to_bytes(4, 'little') + body)\n")
    v1.execute(sid, send + "frame({'channel': 'cellbox', 'type': 'checkpoint_ready', 'report': {}})\n"
                           "frame({'channel': 'cellbox', 'type': 'restored', 'report': {}})")
    assert value(v1, sid, "1 + 1") == "2"
    (copy,) = fork(v1, sid)  # the exchange still works afterwards
    assert value(v1, copy["id"], "2 + 2") == "4"
    ev = v1.execute(copy["id"], "frame({'channel': 'cellbox', 'type': 'become_root'})")
    assert any("protocol" in e.get("value", "") for e in ev.errors), ev
    assert value(v1, sid, "3 + 3") == "6"


def test_an_image_larger_than_the_sandbox_could_hold_is_refused(v1, source):
    """A private mapping of a file counts whole (its pages are the file's until written): 4 GiB
    of /dev/zero would make the daemon copy 4 GiB for a sandbox of 1 GiB. The fork is refused,
    and the original goes on."""
    sid = source["id"]
    v1.execute(sid, "import mmap\n"
                    "zeros = open('/dev/zero', 'rb')\n"
                    "big = mmap.mmap(zeros.fileno(), 4 << 30, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)")
    answer = fork(v1, sid, expect=409)
    assert "would be over" in answer["message"], answer
    assert value(v1, sid, "len(big)") == str(4 << 30)


def test_a_fork_of_a_fork_has_the_state_of_both(v1, source):
    """A fork's memory is mapped from its image: forked in turn, those pages (touched or not)
    must be carried again, since the next clone has nothing of that image."""
    sid = source["id"]
    v1.execute(sid, "import numpy as np\nbase = np.arange(4 << 20)\ntag = 'first'")
    (child,) = fork(v1, sid)
    v1.execute(child["id"], "tag = 'second'\nextra = list(range(1000))")
    (grandchild,) = fork(v1, child["id"])
    assert value(v1, grandchild["id"], "tag, int(base.sum()), len(extra)") == \
        f"('second', {sum(range(4 << 20))}, 1000)"
    assert value(v1, child["id"], "tag") == "'second'"
    assert value(v1, sid, "tag") == "'first'"


def test_a_fork_is_interrupted_like_any_kernel(v1, source):
    """Its signal handlers are the original's, put back: a cell past its time limit is
    interrupted as the original's is, and the fork keeps its state."""
    sid = source["id"]
    v1.execute(sid, "kept = 'yes'")
    (copy,) = fork(v1, sid)
    endless = "import time\nwhile True:\n    time.sleep(0.05)"
    in_fork = v1.execute(copy["id"], endless, timeout_s=1)
    in_original = v1.execute(sid, endless, timeout_s=1)
    assert [e["name"] for e in in_fork.errors] == [e["name"] for e in in_original.errors], \
        (in_fork.errors, in_original.errors)
    assert in_fork.errors and "died" not in in_fork.errors[0]["value"], in_fork.errors
    assert value(v1, copy["id"], "kept") == "'yes'"


LIBPYTHON_FUNCTION = ("import ctypes\n"
                      "ctypes.cast(ctypes.pythonapi.Py_GetVersion, ctypes.c_void_p).value")


def test_zygotes_of_a_build_share_one_layout_and_programs_stay_randomized(make_daemon):
    """Zygotes start without address randomization, so the next daemon's zygote maps libpython
    where the last one did (a full image fits it); the programs a sandbox runs are randomized as
    ever (the zygote drops the flag once its own layout is fixed)."""
    addresses, personalities = [], []
    for _ in range(2):
        d = make_daemon(args=["--pool-size", "0"])
        client = V1(d)
        wait_until(lambda: client.get("api").json()["zygote_ready"], timeout=120,
                   message="the zygote")
        sid = client.create(timeout_s=0)["id"]
        addresses.append(value(client, sid, LIBPYTHON_FUNCTION))
        personalities.append(value(client, sid, "import subprocess\n"
                                                "subprocess.run(['cat', '/proc/self/personality'], "
                                                "capture_output=True, text=True).stdout.strip()"))
        client.remove(sid)
        d.finish()
    assert addresses[0] == addresses[1], addresses
    assert personalities == ["'00000000'", "'00000000'"], personalities
