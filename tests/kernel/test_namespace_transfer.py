"""A kernel's variables carried to another kernel at the Python level (python3-dill), driven
over the channel as cellboxd drives it (docs/kernel-protocol.md, "Namespace transfer"): the
kernel names a memfd of its own, which the test reads and writes through /proc/PID/fd (the
daemon takes it with pidfd_getfd)."""
import json
import os

import pytest

from kernel_process import KernelProcess

STATE = r'''
import socket, numpy as np, pandas as pd

frame = pd.DataFrame({"a": np.arange(1000), "b": [f"row {i}" for i in range(1000)]})
array = np.linspace(0.0, 1.0, 257).reshape(1, 257)
coefficients = np.polyfit([0.0, 1.0, 2.0, 3.0], [1.0, 3.0, 5.0, 7.0], 1)

class Model:
    def __init__(self):
        self.weights = None
    def fit(self, xs, ys):
        self.weights = np.polyfit(xs, ys, 2)
        return self
    def predict(self, x):
        return float(np.polyval(self.weights, x))

model = Model().fit([0, 1, 2, 3], [0, 1, 4, 9])
same_model = model

def make_counter(start):
    count = [start]
    def step():
        count[0] += 1
        return count[0]
    return step

counter = make_counter(41)
square = lambda x: x * x
point = {"x": 1, "tags": ("a", "b")}
offset = 100
def shifted(x):
    return x + offset

class Registry(type):
    pass
class Shape(metaclass=Registry):
    sides = 4
shape = Shape()
aliases = {"shape": shape, "frame": frame}

generator = (i for i in range(10))
next(generator)
listener = socket.socket()

class Unpicklable:
    def __reduce__(self):
        raise RuntimeError("the vendor's handle cannot leave this process")

handle = Unpicklable()
'''

CHECK = r'''
import numpy as np, pandas as pd
expected = pd.DataFrame({"a": np.arange(1000), "b": [f"row {i}" for i in range(1000)]})
offset = 1
result = {
    "frame": bool(frame.equals(expected)),
    "array": bool(np.array_equal(array, np.linspace(0.0, 1.0, 257).reshape(1, 257))),
    "coefficients": [round(float(c), 9) for c in coefficients],
    "model": round(model.predict(5.0), 9),
    "model_class": type(model).__name__,
    "same_object": same_model is model,
    "instance_of_its_class": isinstance(same_model, type(model)),
    "counter": [counter(), counter()],
    "square": square(12),
    "point": point,
    "globals_are_the_namespace": shifted(1),
    "np_is_numpy": np.__name__,
    "shared_across_names": aliases["shape"] is shape and aliases["frame"] is frame,
    "class_with_a_metaclass": isinstance(shape, Shape) and shape.sides == 4,
}
print("RESULT " + json.dumps(result))
'''


def cellbox_frame(kernel, body):
    kernel.send_raw(json.dumps(dict(body, channel="cellbox")).encode())


def next_cellbox_frame(kernel, kind):
    for _ in range(100):
        try:
            frame = kernel.recv(60.0)
        except AssertionError as error:
            raise AssertionError(f"{error}; exit status {kernel.proc.poll()}, stderr: "
                                 f"{kernel.stderr_text()[-2000:]}") from None
        assert frame is not None, f"no {kind} came; stderr: {kernel.stderr_text()[-2000:]}"
        if frame.get("channel") == "cellbox":
            assert frame.get("type") == kind, frame
            return frame
    raise AssertionError(f"no {kind} among 100 frames")


def save_namespace(kernel, max_bytes=1 << 30):
    cellbox_frame(kernel, {"type": "save_namespace", "max_bytes": max_bytes})
    answer = next_cellbox_frame(kernel, "namespace_saved")
    assert "why" not in answer, answer
    with open(f"/proc/{kernel.proc.pid}/fd/{answer['fd']}", "rb") as memfd:
        container = memfd.read()
    cellbox_frame(kernel, {"type": "namespace_release"})
    assert len(container) == answer["bytes"] == answer["report"]["bytes"]
    return container, answer["report"]


def load_namespace(kernel, container):
    cellbox_frame(kernel, {"type": "load_namespace"})
    buffer = next_cellbox_frame(kernel, "namespace_buffer")
    with open(f"/proc/{kernel.proc.pid}/fd/{buffer['fd']}", "r+b") as memfd:
        memfd.write(container)
    cellbox_frame(kernel, {"type": "namespace_filled", "bytes": len(container)})
    return next_cellbox_frame(kernel, "namespace_loaded")


def run(kernel, code):
    """Runs `code`; returns what it printed (the kernel's stdout pipe, up to a marker)."""
    marker = f"END OF CELL {os.urandom(4).hex()}"
    exchange = kernel.execute(code + f"\nprint({marker!r}, flush=True)\n")
    reply = exchange.reply["content"]
    assert reply["status"] == "ok", reply
    kernel.wait_output("stdout", marker)
    text = kernel.output["stdout"].decode()
    kernel.output["stdout"] = b""
    return text.split(marker, 1)[0]


@pytest.fixture()
def kernels():
    started = []

    def start():
        k = KernelProcess()
        started.append(k)
        k.wait_starting()
        return k
    yield start
    for k in started:
        k.close()


@pytest.fixture()
def saved(kernels):
    source = kernels()
    run(source, "import json\n" + STATE)
    container, report = save_namespace(source)
    return container, report


def test_each_kind_of_value_is_carried_equal_to_a_new_kernel(kernels, saved):
    container, report = saved
    for name in ("frame", "array", "coefficients", "model", "same_model", "counter", "square",
                 "point", "shifted", "Model", "make_counter", "np", "pd", "socket"):
        assert name in report["carried"], (name, report)
    target = kernels()
    answer = load_namespace(target, container)
    assert "why" not in answer, answer
    assert set(answer["report"]["carried"]) == set(report["carried"])
    assert answer["report"]["not_carried"] == []
    output = run(target, "import json\n" + CHECK)
    result = json.loads(output.split("RESULT ", 1)[1])
    assert result == {
        "frame": True, "array": True, "coefficients": [2.0, 1.0], "model": 25.0,
        "model_class": "Model", "same_object": True, "instance_of_its_class": True,
        "counter": [42, 43], "square": 144, "point": {"x": 1, "tags": ["a", "b"]},
        "globals_are_the_namespace": 2, "np_is_numpy": "numpy", "shared_across_names": True,
        "class_with_a_metaclass": True,
    }


def test_a_generator_a_socket_and_an_object_that_refuses_are_named_with_why(saved):
    _, report = saved
    why = {entry["name"]: entry["why"] for entry in report["not_carried"]}
    assert set(why) == {"generator", "listener", "handle"}, report
    assert "generator" in why["generator"]
    assert "socket" in why["listener"]
    assert why["handle"] == "RuntimeError: the vendor's handle cannot leave this process"
    for name in ("In", "Out", "_", "__", "_i", "_i1", "_ih", "_oh", "get_ipython", "exit",
                 "quit", "__builtins__", "__name__"):
        assert name not in report["carried"] and name not in why, name


def test_names_past_the_byte_limit_are_named_and_the_rest_carried(kernels):
    source = kernels()
    run(source, "small = 1\nlarge = bytes(200000)\nafter = 'still fits'\n")
    _, report = save_namespace(source, max_bytes=100000)
    assert report["carried"] == ["small", "after"]
    assert report["not_carried"] == [{"name": "large", "why": "the namespace is over 100000 bytes"}]
    assert report["bytes"] <= 100000


@pytest.mark.parametrize("damage", ["magic", "cut"])
def test_a_corrupt_container_loads_nothing_and_says_why(kernels, saved, damage):
    container, _ = saved
    broken = b"XXXXXXXX" + container[8:] if damage == "magic" else container[:-5]
    target = kernels()
    answer = load_namespace(target, broken)
    assert "report" not in answer
    assert ("not a namespace container" in answer["why"] if damage == "magic"
            else "cut short" in answer["why"]), answer
    output = run(target, "print(sorted(n for n in ('frame', 'model', 'counter') if n in dir()))")
    assert output.strip() == "[]"


def test_a_name_that_fails_to_load_is_named_and_its_sharers_are_not_loaded_with_holes(kernels):
    source = kernels()
    run(source, "import types, sys\n"
                "mod = types.ModuleType('made_up_module')\n"
                "sys.modules['made_up_module'] = mod\n"
                "class Thing:\n    pass\n"
                "mod.Thing = Thing\nThing.__module__ = 'made_up_module'\n"
                "thing = Thing()\nholder = [thing]\nplain = [1, 2, 3]\n")
    container, report = save_namespace(source)
    assert {"thing", "holder", "plain"} <= set(report["carried"]), report
    target = kernels()
    answer = load_namespace(target, container)
    why = {entry["name"]: entry["why"] for entry in answer["report"]["not_carried"]}
    assert why["Thing"] == "ModuleNotFoundError: No module named 'made_up_module'", why
    assert why["thing"] == "it shares objects with 'Thing', which did not load"
    assert why["holder"] == "it shares objects with 'thing', which did not load"
    assert "plain" in answer["report"]["carried"]
    assert run(target, "print(plain, 'holder' in dir())").strip() == "[1, 2, 3] False"


def test_a_load_with_a_size_other_than_the_buffer_holds_is_refused(kernels, saved):
    container, _ = saved
    target = kernels()
    cellbox_frame(target, {"type": "load_namespace"})
    buffer = next_cellbox_frame(target, "namespace_buffer")
    with open(f"/proc/{target.proc.pid}/fd/{buffer['fd']}", "r+b") as memfd:
        memfd.write(container[:100])
    cellbox_frame(target, {"type": "namespace_filled", "bytes": len(container)})
    answer = next_cellbox_frame(target, "namespace_loaded")
    assert "not the" in answer["why"]
    assert not os.path.exists(f"/proc/{target.proc.pid}/fd/{buffer['fd']}") or \
        "cellbox-namespace" not in os.readlink(f"/proc/{target.proc.pid}/fd/{buffer['fd']}")


def test_a_failure_inside_the_transfer_is_answered_and_the_kernel_goes_on(kernels):
    target = kernels()
    run(target, "from cellbox_kernel import namespace\n"
                "def broken(kernel, message):\n    raise ZeroDivisionError('a bug')\n"
                "namespace._answer_save = broken\n")
    cellbox_frame(target, {"type": "save_namespace", "max_bytes": 1000})
    answer = next_cellbox_frame(target, "namespace_saved")
    assert answer["why"] == "ZeroDivisionError: a bug"
    cellbox_frame(target, {"type": "namespace_filled", "bytes": 3})  # no load_namespace before
    assert next_cellbox_frame(target, "namespace_loaded")["why"] == "no load_namespace came before"
    assert run(target, "print('still serving')").strip() == "still serving"


def test_open_and_closed_files_are_reopened_in_place_without_truncating(kernels, tmp_path):
    """A file object is carried as its path, mode and position: a "w" or "x" file reopened for
    writing keeps its bytes (it is not opened with O_TRUNC again), a reader comes back at its
    offset, a closed file comes back closed, and a file held by an instance of a cell's class
    (pickled by dill) is carried the same way."""
    lines = "".join(f"line {i}\n" for i in range(5))
    source = kernels()
    run(source, f"""
import os
os.chdir({str(tmp_path)!r})
with open('closed.txt', 'w') as closed_writer:
    closed_writer.write('written and closed')
open_writer = open('open.txt', 'w')
open_writer.write('written, still open')
with open('held.txt', 'w') as f:
    f.write({lines!r})
del f
text_file = open('held.txt')
text_file.readline(); text_file.readline()
raw_file = open('held.txt', 'rb', buffering=0)
raw_file.read(8)
buffered_file = open('held.txt', 'rb')
buffered_file.read(3)
appender = open('closed.txt', 'a')
class Holder:
    def __init__(self, file):
        self.file = file
holder = Holder(open('held.txt', 'r+'))
holder.file.seek(14)
""")
    container, report = save_namespace(source)
    for name in ("closed_writer", "open_writer", "text_file", "raw_file", "buffered_file",
                 "appender", "holder"):
        assert name in report["carried"], (name, report)
    before = {name: (tmp_path / name).read_bytes() for name in ("closed.txt", "open.txt", "held.txt")}
    assert before["open.txt"] == b"written, still open"  # the save flushed the writer
    target = kernels()
    answer = load_namespace(target, container)
    assert "why" not in answer and answer["report"]["not_carried"] == [], answer
    after = {name: (tmp_path / name).read_bytes() for name in before}
    assert after == before, "a file changed by the load"
    output = run(target, """
import json
print('RESULT', json.dumps({
    'closed': [closed_writer.closed, closed_writer.name, closed_writer.mode],
    'open_writer': [open_writer.closed, open_writer.mode, open_writer.tell()],
    'text_line': text_file.readline(), 'raw_read': raw_file.read(6).decode(),
    'buffered_read': buffered_file.read(4).decode(), 'holder_read': holder.file.read(6),
    'appender': appender.tell()}))
""")
    result = json.loads(output.split("RESULT ", 1)[1])
    assert result == {
        "closed": [True, "closed.txt", "w"], "open_writer": [False, "w", 19],
        "text_line": "line 2\n", "raw_read": "ine 1\n", "buffered_read": "e 0\n",
        "holder_read": "line 2", "appender": 18,
    }
    run(target, "open_writer.write(' and more'); open_writer.close()")
    assert (tmp_path / "open.txt").read_bytes() == b"written, still open and more"
