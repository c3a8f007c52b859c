"""Two halves. First, a client that speaks to cellboxd exactly the way AutoGen's Jupyter executor does
(autogen-ext's code_executors/docker_jupyter: JupyterClient, JupyterKernelClient and
DockerJupyterCodeExecutor), run through the scenarios of the project's seed articles.

AutoGen itself (aiohttp, websockets, autogen-core) is not installable here, so this file
re-implements its wire behaviour with requests and websocket-client. What is reproduced,
because clients break on it (see shared/brief/protocols.md):
  REST   GET /api/kernelspecs and checks the name is in ["kernelspecs"]; POST /api/kernels
         {"name": ...} and reads ["id"] without looking at the status; POST .../restart;
         DELETE; header "Authorization: token <t>"; requests.Session with Retry(total=5).
  WS     always ws://, header Authorization, no session_id, no subprotocol, no Origin,
         offers permessage-deflate like the `websockets` library; binary frames are decoded
         as UTF-8 JSON (so the server must not send anything else).
  msgs   header {username: "autogen", version: "5.0", session, msg_id, msg_type,
         date: naive datetime.now().isoformat()}, parent_header {}, metadata {}, buffers {} (a
         dict), channel "shell"; content for execute: silent False, store_history True,
         user_expressions {}, allow_stdin False, stop_on_error True.
  flow   kernel_info_request before every batch, waiting for the reply with that parent
         (reading the top-level "msg_type"); messages of other parents are skipped; stream
         text, execute_result/display_data (text/plain -> text, image/* and text/html ->
         files), first "error" ends the block (ERROR: {ename}: {evalue}\n{traceback}),
         status idle ends it otherwise; a batch stops at the first failing block.

Second (at the end of the file), cellbox's own AutoGen adapter (clients/python,
cellbox.adapters.autogen) against AutoGen's published interfaces, with a stub of autogen_core on
sys.path (tests/clients/autogen_stub) and without autogen_core.
"""
import asyncio
import base64
import dataclasses
import datetime
import importlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest
import requests
import websocket
from requests.adapters import HTTPAdapter, Retry


class AutoGenJupyterClient:
    """REST side (AutoGen's JupyterClient)."""

    def __init__(self, host, port, token, use_https=False):
        self.host, self.port, self.token, self.use_https = host, port, token, use_https
        self.session = requests.Session()
        self.session.mount("http://", HTTPAdapter(max_retries=Retry(total=5, backoff_factor=0.1)))

    def headers(self):
        return {} if self.token is None else {"Authorization": f"token {self.token}"}

    def api_base(self):
        return f"{'https' if self.use_https else 'http'}://{self.host}:{self.port}"

    def ws_base(self):
        return f"ws://{self.host}:{self.port}"  # always ws://, even with use_https

    def list_kernel_specs(self):
        return self.session.get(f"{self.api_base()}/api/kernelspecs", headers=self.headers()).json()

    def list_kernels(self):
        return self.session.get(f"{self.api_base()}/api/kernels", headers=self.headers()).json()

    def start_kernel(self, name):
        r = self.session.post(f"{self.api_base()}/api/kernels", headers=self.headers(), json={"name": name})
        return r.json()["id"]  # no status check, like AutoGen

    def delete_kernel(self, kernel_id):
        self.session.delete(f"{self.api_base()}/api/kernels/{kernel_id}", headers=self.headers()).raise_for_status()

    def restart_kernel(self, kernel_id):
        self.session.post(f"{self.api_base()}/api/kernels/{kernel_id}/restart",
                          headers=self.headers()).raise_for_status()

    def get_kernel_client(self, kernel_id):
        url = f"{self.ws_base()}/api/kernels/{kernel_id}/channels"
        hdrs = [f"{k}: {v}" for k, v in self.headers().items()]
        # what the `websockets` library adds on its own
        hdrs.append("Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits")
        hdrs.append("User-Agent: Python/3.11 websockets/12.0")
        ws = websocket.create_connection(url, header=hdrs, suppress_origin=True, timeout=60)
        accepted = ws.getheaders().get("sec-websocket-extensions", "")
        if "permessage-deflate" in accepted:
            ws.close()
            pytest.skip("server negotiated permessage-deflate, which websocket-client cannot decode "
                        "(AutoGen's websockets library could)")
        return AutoGenKernelClient(ws)

    def close(self):
        self.session.close()


class AutoGenKernelClient:
    """WebSocket side (AutoGen's JupyterKernelClient)."""

    class Result:
        def __init__(self, is_ok, output, data_items):
            self.is_ok, self.output, self.data_items = is_ok, output, data_items

    def __init__(self, ws):
        self.session_id = uuid.uuid4().hex
        self.ws = ws
        self.sent = []

    def stop(self):
        self.ws.close()

    def send(self, content, channel, message_type):
        msg_id = uuid.uuid4().hex
        message = {
            "header": {
                "username": "autogen",
                "version": "5.0",
                "session": self.session_id,
                "msg_id": msg_id,
                "msg_type": message_type,
                "date": datetime.datetime.now().isoformat(),
            },
            "parent_header": {},
            "channel": channel,
            "content": content,
            "metadata": {},
            "buffers": {},
        }
        self.ws.send(json.dumps(message))
        self.sent.append(message)
        return msg_id

    def receive(self, timeout):
        self.ws.settimeout(timeout)
        try:
            data = self.ws.recv()
        except websocket.WebSocketTimeoutException:
            return None
        if isinstance(data, bytes):
            data = data.decode("utf-8")
        return json.loads(data)

    def wait_for_ready(self, timeout):
        msg_id = self.send({}, "shell", "kernel_info_request")
        while True:
            message = self.receive(timeout)
            if message is None:
                return False
            if message.get("parent_header", {}).get("msg_id") == msg_id and message["msg_type"] == "kernel_info_reply":
                return True

    def execute(self, code, timeout):
        msg_id = self.send({"code": code, "silent": False, "store_history": True, "user_expressions": {},
                            "allow_stdin": False, "stop_on_error": True}, "shell", "execute_request")
        text, data_items = [], []
        while True:
            message = self.receive(timeout)
            if message is None:
                return self.Result(False, "ERROR: Timeout waiting for output from code block.", [])
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            msg_type, content = message["msg_type"], message["content"]
            if msg_type in ("execute_result", "display_data"):
                for mime, data in content["data"].items():
                    if mime == "text/plain":
                        text.append(data)
                    elif mime.startswith("image/") or mime == "text/html":
                        data_items.append((mime, data))
                    else:
                        text.append(json.dumps(data))
            elif msg_type == "stream":
                text.append(content["text"])
            elif msg_type == "error":
                return self.Result(False, f"ERROR: {content['ename']}: {content['evalue']}\n{content['traceback']}", [])
            if msg_type == "status" and content["execution_state"] == "idle":
                break
        return self.Result(True, "\n".join(str(t) for t in text), data_items)


class AutoGenExecutor:
    """DockerJupyterCodeExecutor's flow around the two clients."""

    def __init__(self, host, port, token, output_dir, kernel_name="python3", timeout=60):
        self.client = AutoGenJupyterClient(host, port, token)
        self.output_dir = output_dir
        self.kernel_name = kernel_name
        self.timeout = timeout
        self.kernel_id = None
        self.kernel_client = None

    def start(self):
        specs = self.client.list_kernel_specs()
        if self.kernel_name not in specs["kernelspecs"]:
            raise ValueError(f"Kernel {self.kernel_name} is not installed.")
        self.kernel_id = self.client.start_kernel(self.kernel_name)

    def _ensure_kernel_client(self):
        if self.kernel_id is None:
            self.start()
        if self.kernel_client is None:
            self.kernel_client = self.client.get_kernel_client(self.kernel_id)
        return self.kernel_client

    def execute_code_blocks(self, blocks):
        kc = self._ensure_kernel_client()
        if not kc.wait_for_ready(self.timeout):
            return 1, "ERROR: Kernel not ready", []
        outputs, files = [], []
        for code in blocks:
            result = kc.execute(code, self.timeout)
            if not result.is_ok:
                return 1, f"ERROR: {result.output}", files
            outputs.append(result.output)
            for mime, data in result.data_items:
                if mime == "image/png":
                    path = os.path.join(self.output_dir, f"{uuid.uuid4().hex}.png")
                    with open(path, "wb") as f:
                        f.write(base64.b64decode(data))
                    outputs.append(path)
                    files.append(path)
                elif mime == "text/html":
                    path = os.path.join(self.output_dir, f"{uuid.uuid4().hex}.html")
                    with open(path, "w") as f:
                        f.write(data)
                    outputs.append(path)
                    files.append(path)
                else:
                    outputs.append(json.dumps(data))
        return 0, "\n".join(str(o) for o in outputs), files

    def restart(self):
        if self.kernel_id is not None:
            self.client.restart_kernel(self.kernel_id)
        if self.kernel_client is not None:
            self.kernel_client.stop()
            self.kernel_client = None

    def stop(self):
        if self.kernel_id is not None:
            self.client.delete_kernel(self.kernel_id)
        if self.kernel_client is not None:
            self.kernel_client.stop()
            self.kernel_client = None
        self.client.close()


# ---------------------------------------------------------------------------- tests

@pytest.fixture
def output_dir():
    d = tempfile.mkdtemp(prefix="cellbox-test-autogen-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def executor(daemon, output_dir):
    ex = AutoGenExecutor(daemon.host, daemon.port, daemon.token, output_dir)
    ex.start()
    yield ex
    try:
        ex.stop()
    except Exception:
        daemon.client().delete(f"api/kernels/{ex.kernel_id}")


def test_seed_stateful_rounds(executor):
    code, out, files = executor.execute_code_blocks([
        'x = 1+2\nprint("Round one: The calculation for the value of x is done.")'])
    assert (code, files) == (0, [])
    assert out.strip() == "Round one: The calculation for the value of x is done."
    code, out, _ = executor.execute_code_blocks(['print("Round two: Get the value of variable x again: x=", x)'])
    assert code == 0
    assert out.strip() == "Round two: Get the value of variable x again: x= 3"


def test_seed_dataframe_analysis(daemon, executor):
    # the seed's superstore.csv sits in the kernel's working directory (AutoGen's bind_dir)
    csv = ("Row ID,Order ID,Region,Category,Sales,Profit\n"
           "1,CA-1,West,Furniture,100.5,10\n"
           "2,CA-2,East,Technology,200.25,20\n"
           "3,CA-3,West,Office Supplies,50.0,5\n"
           "4,CA-4,Central,Furniture,75.25,-3\n"
           "5,CA-5,South,Technology,300.0,40\n"
           "6,CA-6,East,Furniture,20.0,1\n")
    with open(os.path.join(daemon.workspace(executor.kernel_id), "superstore.csv"), "w") as f:
        f.write(csv)
    code, out, _ = executor.execute_code_blocks([
        "from pathlib import Path\nimport pandas as pd\n"
        "file_path = Path('superstore.csv')\ndf = pd.read_csv(file_path)\nprint(df.iloc[:5, :6].head())"])
    assert code == 0, out
    assert "Region" in out and "Furniture" in out and "CA-5" in out and "CA-6" not in out
    code, out, _ = executor.execute_code_blocks([
        "region_sales_sum = df.groupby('Region', as_index=False)['Sales'].sum()\nprint(region_sales_sum)"])
    assert code == 0, out
    lines = {line.split()[1]: float(line.split()[2]) for line in out.strip().splitlines()[1:]}
    assert lines == {"Central": 75.25, "East": 220.25, "South": 300.0, "West": 150.5}


def test_dataframe_repr_saved_as_html(executor, output_dir):
    code, out, files = executor.execute_code_blocks([
        "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})"])
    assert code == 0, out
    html = [f for f in files if f.endswith(".html")]
    assert len(html) == 1 and os.path.dirname(html[0]) == output_dir
    with open(html[0]) as f:
        assert "<table" in f.read()
    assert html[0] in out
    assert "a  b" in out  # the text/plain part


def test_matplotlib_png_saved(executor, output_dir):
    code, out, files = executor.execute_code_blocks([
        "import matplotlib.pyplot as plt\nplt.figure()\nplt.plot([1, 4, 9, 16])\nplt.title('squares')\nplt.show()"])
    assert code == 0, out
    pngs = [f for f in files if f.endswith(".png")]
    assert len(pngs) == 1, (out, files)
    with open(pngs[0], "rb") as f:
        data = f.read()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000
    assert pngs[0] in out


def test_error_stops_batch_and_next_batch_works(executor):
    code, out, _ = executor.execute_code_blocks(["before_error = 1", "1/0", "after_error = 1"])
    assert code == 1
    assert out.startswith("ERROR: ERROR: ZeroDivisionError: division by zero\n"), out
    assert "Traceback" in out or "ZeroDivisionError" in out.split("\n", 1)[1]
    # The error return left the execute_reply and idle of "1/0" unread; the next batch's
    # kernel_info handshake has to skip them.
    code, out, _ = executor.execute_code_blocks(["print(before_error, 'after_error' in dir())"])
    assert code == 0, out
    assert out.strip() == "1 False"


def test_several_blocks_share_one_batch(executor):
    code, out, _ = executor.execute_code_blocks(["a = 2", "b = a * 21", "print(b)", "b"])
    assert code == 0
    assert out == "\n".join(["", "", "42\n", "42"])


def test_restart_clears_state_and_reconnects(executor):
    executor.execute_code_blocks(["gone_after_restart = 1"])
    executor.restart()
    code, out, _ = executor.execute_code_blocks(["print('gone_after_restart' in dir())"])
    assert code == 0, out
    assert out.strip() == "False"


def test_input_is_refused_not_hung(executor):
    code, out, _ = executor.execute_code_blocks(["input('name? ')"])
    assert code == 1
    assert "StdinNotImplementedError" in out


def test_only_text_frames_reach_autogen(daemon, executor):
    kc = executor._ensure_kernel_client()
    assert kc.wait_for_ready(60)
    res = kc.execute("from IPython.display import display\nimport numpy as np\n"
                     "display({'text/plain': 'x', 'application/json': {'k': [1, 2]}}, raw=True)\n"
                     "print(np.arange(3))", 60)
    assert res.is_ok, res.output
    assert '{"k": [1, 2]}' in res.output and "[0 1 2]" in res.output


def test_stop_deletes_kernel(daemon, output_dir):
    ex = AutoGenExecutor(daemon.host, daemon.port, daemon.token, output_dir)
    code, out, _ = ex.execute_code_blocks(["print('lazy start')"])  # starts the kernel on first use
    assert code == 0 and out.strip() == "lazy start"
    kid = ex.kernel_id
    assert daemon.client().kernel_exists(kid)
    assert kid in {k["id"] for k in ex.client.list_kernels()}
    ex.stop()
    assert not daemon.client().kernel_exists(kid)


def test_unknown_kernel_name_rejected_client_side(daemon, output_dir):
    ex = AutoGenExecutor(daemon.host, daemon.port, daemon.token, output_dir, kernel_name="nope")
    with pytest.raises(ValueError):
        ex.start()
    ex.client.close()


def test_two_executors_on_one_server_are_isolated(daemon, output_dir):
    a = AutoGenExecutor(daemon.host, daemon.port, daemon.token, output_dir)
    b = AutoGenExecutor(daemon.host, daemon.port, daemon.token, output_dir)
    try:
        a.execute_code_blocks(["who = 'a'"])
        b.execute_code_blocks(["who = 'b'"])
        assert a.execute_code_blocks(["print(who)"])[1].strip() == "a"
        assert b.execute_code_blocks(["print(who)"])[1].strip() == "b"
    finally:
        a.stop()
        b.stop()


# ---------------------------------------------------------------------------- the AutoGen adapter
#
# cellbox.adapters.autogen (clients/python) against AutoGen's published interfaces. AutoGen
# cannot be installed here (no PyPI): each test runs twice, once with tests/clients/autogen_stub
# on sys.path (a stub of autogen_core's published classes and signatures: CodeResult,
# CodeExecutor, Component, ComponentModel, CancellationToken, FunctionWithRequirements, ...),
# once with autogen_core not importable (the adapter's own classes with the same fields).

CLIENT = os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python")
AUTOGEN_STUB = os.path.join(os.path.dirname(__file__), "autogen_stub")
_ADAPTER_MODULES = ("autogen_core", "cellbox.adapters.autogen", "cellbox.adapters._autogen")


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def norm(values):
    return float(np.sqrt(sum(v * v for v in values))) + sqrt(0)  # noqa: F821 - names the module imports


def _adapter_modules():
    return {name: module for name, module in sys.modules.items() if name.startswith(_ADAPTER_MODULES)}


@pytest.fixture(params=["autogen_core stub", "no autogen_core"])
def autogen(request, daemon, monkeypatch):
    """The adapter module imported afresh, with the stub autogen_core or without any; the
    modules it loaded are taken out again afterwards, so nothing else sees the stub."""
    if os.environ.get("CELLBOX_TEST_REFERENCE"):
        pytest.skip("the adapter speaks cellbox's /v1 API")
    monkeypatch.syspath_prepend(os.path.abspath(CLIENT))
    before = _adapter_modules()
    for name in before:
        del sys.modules[name]
    if request.param == "autogen_core stub":
        monkeypatch.syspath_prepend(AUTOGEN_STUB)
    else:
        monkeypatch.setitem(sys.modules, "autogen_core", None)
    import cellbox.adapters
    before_attribute = getattr(cellbox.adapters, "autogen", None)
    module = importlib.import_module("cellbox.adapters.autogen")
    assert module.AUTOGEN_INSTALLED == (request.param == "autogen_core stub")
    monkeypatch.setenv("CELLBOX_TOKEN", daemon.token)    # what a loaded executor authenticates with
    yield module
    for name in _adapter_modules():
        del sys.modules[name]
    sys.modules.update(before)
    if before_attribute is not None:
        cellbox.adapters.autogen = before_attribute


class PlainToken:
    """A CancellationToken-like object without autogen_core: add_callback and cancel."""

    def __init__(self):
        self.callbacks = []

    def add_callback(self, callback):
        self.callbacks.append(callback)

    def cancel(self):
        for callback in self.callbacks:
            callback()


def _token(autogen):
    if autogen.AUTOGEN_INSTALLED:
        from autogen_core import CancellationToken
        return CancellationToken()
    return PlainToken()


def _wait_for_file(sandbox, path, then):
    """Call `then` once `path` exists in the sandbox (at most 30 s of looking)."""
    for _ in range(300):
        if sandbox.files.exists(path):
            then()
            return
        time.sleep(0.1)


def test_adapter_result_is_autogens_code_result(autogen, daemon, output_dir):
    with autogen.CellboxCodeExecutor(url=daemon.origin, token=daemon.token, output_dir=output_dir) as executor:
        result = executor.execute_code_blocks([autogen.CodeBlock("print(6 * 7)")])
    assert (result.exit_code, result.output, result.output_files, result.code_file) == (0, "42", [], None)
    if autogen.AUTOGEN_INSTALLED:
        from autogen_core.code_executor import CodeExecutor, CodeResult
        assert isinstance(result, CodeResult)
        assert issubclass(autogen.AsyncCellboxCodeExecutor, CodeExecutor)
    else:
        assert [f.name for f in dataclasses.fields(result)] == ["exit_code", "output", "output_files", "code_file"]


def test_adapter_functions_module_and_work_dir(autogen, daemon, output_dir):
    functions = [add, "def greet(name):\n    return 'hello ' + name\n"]
    if autogen.AUTOGEN_INSTALLED:
        from autogen_core.code_executor import (Alias, FunctionWithRequirements, ImportFromModule,
                                                with_requirements)

        @with_requirements(python_packages=["numpy"], global_imports=["json"])
        def as_json(value):
            return json.dumps(value, sort_keys=True)

        functions += [as_json,
                      FunctionWithRequirements.from_callable(
                          norm, python_packages=["numpy"],
                          global_imports=[Alias("numpy", "np"), ImportFromModule("math", ["sqrt"])]),
                      FunctionWithRequirements.from_str("def twice(x):\n    return 2 * x\n")]
    with autogen.CellboxCodeExecutor(url=daemon.origin, token=daemon.token, output_dir=output_dir,
                                     work_dir="/workspace/agent", functions=functions,
                                     functions_module="tools") as executor:
        assert executor.work_dir == "/workspace/agent" and executor.functions_module == "tools"
        result = executor.execute_code_blocks([autogen.CodeBlock(
            "from tools import add, greet\nimport os\nprint(add(2, 3), greet('box'), os.getcwd())")])
        assert (result.exit_code, result.output) == (0, "5 hello box /workspace/agent"), result.output
        module = executor.sandbox.files.read_text("/workspace/agent/tools.py")
        assert "def add(a: int, b: int) -> int:" in module and "def greet(name):" in module
        shell = executor.execute_code_blocks([autogen.CodeBlock(
            "pwd; python3 -c 'from tools import add; print(add(1, 1))'", "bash")])
        assert (shell.exit_code, shell.output) == (0, "/workspace/agent\n2")
        if autogen.AUTOGEN_INSTALLED:
            assert "@with_requirements" not in module and "import json" in module
            assert "import numpy as np" in module and "from math import sqrt" in module
            done = executor.execute_code_blocks([autogen.CodeBlock(
                "from tools import as_json, norm, twice\nprint(as_json({'b': 1, 'a': 2}), norm([3, 4]), twice(21))")])
            assert (done.exit_code, done.output) == (0, '{"a": 2, "b": 1} 5.0 42'), done.output
        prompt = executor.format_functions_for_prompt()
        assert "from tools import foo" in prompt and "def add(a: int, b: int) -> int:" in prompt
        assert '"""Add two numbers."""' in prompt and "def greet(name):" in prompt
        # a fresh kernel imports them again
        executor.restart()
        again = executor.execute_code_blocks([autogen.CodeBlock("from tools import add\nprint(add(1, 2))")])
        assert (again.exit_code, again.output) == (0, "3")


def test_adapter_broken_functions_module_is_named(autogen, daemon, output_dir):
    executor = autogen.CellboxCodeExecutor(url=daemon.origin, token=daemon.token, output_dir=output_dir,
                                           functions=["def broken(:\n    pass\n"])
    with executor, pytest.raises(ValueError, match="functions module functions.py failed to load"):
        executor.execute_code_blocks([autogen.CodeBlock("print(1)")])
    with pytest.raises(ValueError, match="not a Python identifier"):
        autogen.CellboxCodeExecutor(functions_module="not-a-name")


def test_adapter_filename_blocks_saved_under_work_dir(autogen, daemon, output_dir):
    with autogen.CellboxCodeExecutor(url=daemon.origin, token=daemon.token, output_dir=output_dir,
                                     work_dir="/workspace/job") as executor:
        code = "# filename: scripts/hello.py\nprint('hi from a file')\n"
        shell = "# filename: run.sh\necho from sh\n"
        result = executor.execute_code_blocks([autogen.CodeBlock(code), autogen.CodeBlock(shell, "sh")])
        assert (result.exit_code, result.output) == (0, "hi from a file\nfrom sh")
        assert result.code_file == "/workspace/job/scripts/hello.py"
        assert executor.sandbox.files.read_text("/workspace/job/scripts/hello.py") == code
        assert executor.sandbox.files.read_text("/workspace/job/run.sh") == shell
        ran = executor.execute_code_blocks([autogen.CodeBlock("python3 scripts/hello.py", "bash")])
        assert (ran.exit_code, ran.output) == (0, "hi from a file")
        escape = executor.execute_code_blocks([autogen.CodeBlock("# filename: ../escape.py\nprint('never')")])
        assert escape.exit_code == 1 and escape.output.startswith("Filename is not in the workspace")
        assert "never" not in escape.output
        assert not executor.sandbox.files.exists("/workspace/escape.py")


def test_adapter_html_results_saved_as_output_files(autogen, daemon, output_dir):
    with autogen.CellboxCodeExecutor(url=daemon.origin, token=daemon.token, output_dir=output_dir) as executor:
        result = executor.execute_code_blocks([autogen.CodeBlock(
            "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})")])
    assert result.exit_code == 0, result.output
    assert len(result.output_files) == 1
    page = result.output_files[0]
    assert page.suffix == ".html" and page.parent == Path(output_dir).absolute()
    assert "<table" in page.read_text()
    assert f"HTML data saved to {page}" in result.output and "a  b" in result.output


LONG_CELL = ("import time\nfinished = False\nopen('started', 'w').close()\n"
             "for step in range(600):\n    time.sleep(0.1)\nfinished = True\n")


def test_adapter_cancellation_interrupts_the_cell(autogen, daemon, output_dir):
    import cellbox
    with autogen.CellboxCodeExecutor(url=daemon.origin, token=daemon.token, output_dir=output_dir,
                                     timeout=300) as executor:
        watcher = cellbox.Sandbox(executor.sandbox.id, url=daemon.origin, token=daemon.token)
        token = _token(autogen)
        cancel = threading.Thread(target=_wait_for_file, args=(watcher, "/workspace/started", token.cancel))
        cancel.start()
        try:
            with pytest.raises(asyncio.CancelledError):
                executor.execute_code_blocks([autogen.CodeBlock(LONG_CELL)], token)
        finally:
            cancel.join()
        # the cell was stopped in the sandbox (KeyboardInterrupt mid-loop), the kernel lives on
        after = executor.execute_code_blocks([autogen.CodeBlock("print(finished, step < 599)")])
        assert (after.exit_code, after.output) == (0, "False True")

        token = _token(autogen)
        cancel = threading.Thread(target=_wait_for_file, args=(watcher, "/workspace/started_sh", token.cancel))
        cancel.start()
        try:
            with pytest.raises(asyncio.CancelledError):
                executor.execute_code_blocks([autogen.CodeBlock("touch started_sh; sleep 600; touch ended", "sh")],
                                             token)
        finally:
            cancel.join()
        assert [c for c in executor.sandbox.commands.list() if c.state == "running"] == []
        assert not executor.sandbox.files.exists("/workspace/ended")


def test_adapter_async_cancellation(autogen, daemon, output_dir):
    import cellbox

    async def main():
        async with autogen.AsyncCellboxCodeExecutor(url=daemon.origin, token=daemon.token,
                                                    output_dir=output_dir, timeout=300) as executor:
            watcher = cellbox.Sandbox(executor.sync.sandbox.id, url=daemon.origin, token=daemon.token)
            token = _token(autogen)
            task = asyncio.ensure_future(executor.execute_code_blocks([autogen.CodeBlock(LONG_CELL)], token))
            await asyncio.to_thread(_wait_for_file, watcher, "/workspace/started", token.cancel)
            with pytest.raises(asyncio.CancelledError):
                await task
            after = await executor.execute_code_blocks([autogen.CodeBlock("print(finished)")], _token(autogen))
            return after.exit_code, after.output

    assert asyncio.run(main()) == (0, "False")


def test_adapter_dump_and_load_component(autogen, daemon, output_dir):
    import cellbox
    sandbox = cellbox.Sandbox.create(timeout_s=0, url=daemon.origin, token=daemon.token)
    try:
        executor = autogen.AsyncCellboxCodeExecutor(sandbox, timeout=30, output_dir=output_dir,
                                                    work_dir="/workspace/w", functions_module="helpers")
        model = executor.dump_component()
        if autogen.AUTOGEN_INSTALLED:
            import autogen_core
            assert isinstance(model, autogen_core.ComponentModel)
        assert model.provider == "cellbox.adapters.autogen.AsyncCellboxCodeExecutor"
        assert (model.component_type, model.version, model.component_version) == ("code_executor", 1, 1)
        assert model.description
        assert model.config == {"url": sandbox.connection.url, "sandbox_id": sandbox.id, "timeout": 30,
                                "work_dir": "/workspace/w", "output_dir": output_dir,
                                "functions_module": "helpers", "sandbox_options": {"timeout_s": 3600}}
        assert daemon.token not in json.dumps(model.model_dump())        # never the token
        asyncio.run(executor.execute_code_blocks([autogen.CodeBlock("kept = 'state'")]))

        loaded = autogen.AsyncCellboxCodeExecutor.load_component(model.model_dump())
        assert type(loaded) is autogen.AsyncCellboxCodeExecutor
        assert loaded.dump_component().config == model.config
        result = asyncio.run(loaded.execute_code_blocks([autogen.CodeBlock("import os\nprint(kept, os.getcwd())")]))
        assert (result.exit_code, result.output) == (0, "state /workspace/w")   # the same sandbox and kernel
        asyncio.run(loaded.stop())
        assert sandbox.is_running()                                    # given, so not killed

        own = autogen.CellboxCodeExecutor(url=daemon.origin, token=daemon.token, timeout=5)
        config = own.dump_component().config
        assert "sandbox_id" not in config and "output_dir" not in config and config["timeout"] == 5
        assert own.dump_component().provider == "cellbox.adapters.autogen.CellboxCodeExecutor"
        fresh = autogen.CellboxCodeExecutor.load_component(own.dump_component())
        with fresh:
            assert fresh.sandbox.id != sandbox.id
            assert fresh.execute_code_blocks([autogen.CodeBlock("print('new')")]).output == "new"
        own.stop()
    finally:
        sandbox.kill()
