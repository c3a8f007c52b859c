"""Cell code used by several tests, and the host side of "wait for a file" handshakes.

A cell that must stay running until the test says so polls for a file in its working
directory; the test creates that file in the kernel's workspace (DATA_DIR/workspaces/<id>) from
the host. This makes "while the cell runs" checks causal, with no sleeps in the tests."""
import os


def wait_for_file(name, limit=60, before="", after=""):
    """Code for a cell that runs `before`, polls for `name` in its cwd (at most `limit` s),
    prints whether it saw it, then runs `after`."""
    return (
        "import os as _os, time as _time\n"
        f"{before}\n"
        f"_deadline = _time.monotonic() + {limit}\n"
        f"while not _os.path.exists({name!r}) and _time.monotonic() < _deadline:\n"
        "    _time.sleep(0.02)\n"
        f"print('go seen' if _os.path.exists({name!r}) else 'go NOT seen', flush=True)\n"
        f"{after}\n"
    )


def release(server, kernel_id, name):
    """Create `name` in the kernel's workspace, letting a wait_for_file cell go on."""
    path = os.path.join(server.workspace(kernel_id), name)
    with open(path, "w") as f:
        f.write("go")
    return path
