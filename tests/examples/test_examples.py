"""Runs each example of examples/ as a subprocess against a live cellboxd, with the scripted
model, and checks what it did: the state carried between calls, the CSV totals against what
pandas computes here from the same CSV, the chart is a PNG, the Fibonacci numbers, the round
robin reaching TERMINATION. Then the real-model path (--model/--base-url/--api-key) against a
stand-in OpenAI-compatible server, and the CSV generator's reproducibility."""
import json
import os
import re
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLES = os.path.join(REPO, "examples")
CSV = os.path.join(EXAMPLES, "data", "superstore.csv")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
sys.path.insert(0, os.path.join(REPO, "clients", "python"))

import cellbox  # noqa: E402
from helpers.daemon import serving_in_thread  # noqa: E402


# The examples use cellbox's own /v1 API: skipped against the reference Jupyter Server. The
# module's `daemon` is tests/conftest.py's.
pytestmark = pytest.mark.cellbox_only


@pytest.fixture(scope="module")
def conn(daemon):
    return daemon.connection()


@pytest.fixture(scope="module")
def local_frame():
    pd = pytest.importorskip("pandas")
    return pd.read_csv(CSV)


def run_example(name, conn, output_dir, *extra, env_extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CELLBOX_", "OPENAI_"))}
    env.update(env_extra or {})
    proc = subprocess.run([sys.executable, os.path.join(EXAMPLES, name), "--url", conn["url"],
                           "--token", conn["token"], "--output-dir", str(output_dir), *extra],
                          capture_output=True, text=True, timeout=120, env=env, cwd=str(output_dir.parent))
    assert proc.returncode == 0, f"{name} exited {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    assert "OK:" in proc.stdout
    # every example deletes its sandbox when it is done
    assert cellbox.Sandbox.list(**conn) == [], f"{name} left sandboxes behind"
    return proc.stdout


def test_01_stateful(conn, tmp_path):
    out = run_example("01_stateful.py", conn, tmp_path / "out")
    assert "Round one: The calculation for the value of x is done." in out
    assert "Round two: Get the value of variable x again: x= 3" in out
    assert out.index("x = 1+2") < out.index("Round one") < out.index('x=", x)') < out.index("x= 3")


def test_02_csv_analysis(conn, tmp_path, local_frame):
    output = tmp_path / "out"
    out = run_example("02_csv_analysis.py", conn, output)
    df = local_frame
    expected_regions = df.groupby("Region")["Sales"].sum().round(2).to_dict()
    totals = json.loads((output / "region_totals.json").read_text())
    assert totals["regions"].keys() == expected_regions.keys()
    for region, sales in expected_regions.items():
        assert totals["regions"][region] == pytest.approx(sales, abs=0.01)
    assert totals["total_sales"] == pytest.approx(round(df["Sales"].sum(), 2), abs=0.01)
    assert totals["total_profit"] == pytest.approx(round(df["Profit"].sum(), 2), abs=0.01)
    assert totals["orders"] == df["Order ID"].nunique() and totals["rows"] == len(df) == 3000
    # sorted by sales, as the cell asked
    assert list(totals["regions"].values()) == sorted(totals["regions"].values(), reverse=True)
    png = (output / "region_sales.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 5000
    head = (output / "head.html").read_text()
    assert "<table" in head and "Order ID" in head and df["Order ID"][0] in head
    for region, sales in expected_regions.items():
        assert f"{sales:,.2f}" in out                       # the totals it printed
    assert "(3000, 21)" in out


def test_03_fibonacci(conn, tmp_path):
    out = run_example("03_fibonacci_openai_tool.py", conn, tmp_path / "out")
    fib = [1, 1]
    while len(fib) < 14:
        fib.append(fib[-1] + fib[-2])
    assert str(fib) in out and fib[-1] == 377
    assert "The 14th Fibonacci number is 377." in out


def test_04_round_robin(conn, tmp_path, local_frame):
    output = tmp_path / "out"
    out = run_example("04_round_robin.py", conn, output)
    record = json.loads((output / "round_robin.json").read_text())
    assert record["terminated"] is True
    speakers = [m["source"] for m in record["messages"]]
    assert speakers == ["user"] + ["task_planner", "code_writer", "code_executor"] * 2 + ["task_planner"]
    assert "TERMINATION" in record["messages"][-1]["content"]
    table = record["messages"][-2]["content"]
    found = dict(re.findall(r"^\s*(\w+)\s+([\d.]+)\s*$", table, re.MULTILINE))
    expected = local_frame.groupby("Region")["Sales"].sum().round(2).to_dict()
    assert {k: float(v) for k, v in found.items()} == pytest.approx(expected, abs=0.01)
    # the second cell used the DataFrame the first one loaded: the kernel kept it
    assert "read_csv" not in record["messages"][5]["content"]
    assert "TERMINATION" in out


# ---------------------------------------------------------------------------- a real model

class StandIn(BaseHTTPRequestHandler):
    """An OpenAI-compatible /chat/completions that answers like a model would."""

    requests = []
    respond = None

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        StandIn.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        message = StandIn.respond(body)
        data = json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "model": body["model"],
                           "choices": [{"index": 0, "message": {"role": "assistant", **message},
                                        "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def stand_in():
    StandIn.requests = []
    with serving_in_thread(ThreadingHTTPServer(("127.0.0.1", 0), StandIn)) as origin:
        yield f"{origin}/v1"


def test_real_model_path_function_calling(conn, tmp_path, stand_in):
    def respond(body):
        last = body["messages"][-1]
        if last["role"] == "tool":
            return {"content": f"The 14th Fibonacci number is {last['content'].splitlines()[-1]}."}
        code = "a, b = 0, 1\nfor _ in range(14):\n    a, b = b, a + b\na"
        return {"content": None, "tool_calls": [{"id": "call_x", "type": "function", "function": {
            "name": "execute_python", "arguments": json.dumps({"code": code})}}]}

    StandIn.respond = staticmethod(respond)
    out = run_example("03_fibonacci_openai_tool.py", conn, tmp_path / "out", "--model", "stand-in",
                      env_extra={"OPENAI_BASE_URL": stand_in, "OPENAI_API_KEY": "sk-test"})
    assert "model: stand-in" in out and "The 14th Fibonacci number is 377." in out
    first, second = StandIn.requests
    assert first["path"] == "/v1/chat/completions" and first["auth"] == "Bearer sk-test"
    assert first["body"]["model"] == "stand-in"
    assert first["body"]["tools"][0]["function"]["name"] == "execute_python"
    assert second["body"]["messages"][-1] == {"role": "tool", "tool_call_id": "call_x", "content": "377"}


def test_real_model_path_code_blocks(conn, tmp_path, stand_in):
    def respond(body):
        task = body["messages"][-1]["content"]
        code = "x = 1+2\nprint('set')" if task.startswith("Compute") else "print('x=', x)"
        return {"content": f"Here it is:\n```python\n{code}\n```"}

    StandIn.respond = staticmethod(respond)
    out = run_example("01_stateful.py", conn, tmp_path / "out", "--model", "stand-in", "--base-url", stand_in,
                      "--api-key", "sk-flag")
    assert "x= 3" in out and len(StandIn.requests) == 2
    assert StandIn.requests[0]["auth"] == "Bearer sk-flag"


def test_superstore_csv_is_reproducible(tmp_path):
    target = tmp_path / "again.csv"
    subprocess.run([sys.executable, os.path.join(EXAMPLES, "data", "make_superstore.py"), "--out", str(target)],
                   check=True, capture_output=True, timeout=60)
    assert target.read_bytes() == open(CSV, "rb").read()
    header = open(CSV).readline().strip().split(",")
    assert {"Order Date", "Region", "Category", "Sub-Category", "Sales", "Quantity", "Profit"} <= set(header)
