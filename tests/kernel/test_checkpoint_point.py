"""The kernel's side of a checkpoint (docs/kernel-protocol.md, "Checkpoints"): asked, an idle
kernel says checkpoint_ready with what it can and cannot carry, waits for checkpoint_done, then
goes on unchanged and says nothing more; a kernel with threads refuses and goes on."""
import json

import pytest

from kernel_process import started_kernel


@pytest.fixture
def kernel():
    yield from started_kernel()


def ask_checkpoint(k):
    k.send_raw(json.dumps({"channel": "cellbox", "type": "checkpoint"}).encode())
    return k.recv(timeout=10)


def done(k):
    k.send_raw(json.dumps({"channel": "cellbox", "type": "checkpoint_done"}).encode())


def test_an_idle_kernel_reports_what_it_carries_waits_and_goes_on(kernel, tmp_path):
    path = tmp_path / "data.txt"
    path.write_text("0123456789")
    kernel.execute(f"import socket\nf = open({str(path)!r}, 'rb', buffering=0)\nhead = f.read(4)\n"
                   "pair = socket.socketpair()\nvalue = 41")
    ready = ask_checkpoint(kernel)
    assert ready["channel"] == "cellbox" and ready["type"] == "checkpoint_ready", ready
    report = ready["report"]
    assert report["threads"] == 1
    files = {f["path"]: f for f in report["open_files"]}
    assert files[str(path)]["offset"] == 4 and files[str(path)]["carried"] is True
    assert [e for e in report["not_carried"] if e["kind"] == "socket"], report
    # It waits for checkpoint_done: nothing comes meanwhile.
    assert kernel.recv(timeout=0.5) is None
    done(kernel)
    result = kernel.execute("value + 1, f.read(3)")
    assert result.one("execute_result")["content"]["data"]["text/plain"] == "(42, b'456')"


def test_a_request_that_comes_instead_of_done_is_handled_after(kernel):
    kernel.execute("n = 1")
    assert ask_checkpoint(kernel)["type"] == "checkpoint_ready"
    result = kernel.execute("n + 1")  # sent while the kernel waits at its checkpoint point
    assert result.one("execute_result")["content"]["data"]["text/plain"] == "2"


def test_a_kernel_with_threads_refuses_and_goes_on(kernel):
    kernel.execute("import threading\nstop = threading.Event()\n"
                   "worker = threading.Thread(target=stop.wait)\nworker.start()")
    refused = ask_checkpoint(kernel)
    assert refused["type"] == "checkpoint_refused", refused
    assert refused["why"].startswith("has 2 threads"), refused
    kernel.execute("stop.set(); worker.join()")
    result = kernel.execute("worker.is_alive()")
    assert result.one("execute_result")["content"]["data"]["text/plain"] == "False"
