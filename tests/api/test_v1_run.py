"""POST /v1/run: stateless runs with AutoGen's command-line semantics."""
import base64
import time

from helpers.asserts import assert_v1_error, expect


def run(v1, **body):
    r = v1.post("v1/run", json=body, timeout=120)
    assert r.status_code == 200, f"{r.status_code} {r.text[:500]}"
    out = r.json()
    for key in ("status", "exit_code", "output", "stdout", "stderr", "timed_out", "truncated", "blocks",
                "accounting"):
        assert key in out, (key, out)
    return out


def test_python(v1):
    out = run(v1, language="python", code="import sys\nprint('hi')\nprint('oops', file=sys.stderr)\nprint(__name__)")
    assert out["status"] == "ok" and out["exit_code"] == 0 and out["timed_out"] is False
    assert out["stdout"] == "hi\n__main__\n" and out["stderr"] == "oops\n"
    assert "hi" in out["output"] and "oops" in out["output"]
    assert out["blocks"] == [{"language": "python", "exit_code": 0, "output": out["output"]}] or \
        (len(out["blocks"]) == 1 and out["blocks"][0]["exit_code"] == 0)
    acc = out["accounting"]
    assert all(type(acc[k]) is int for k in ("wall_ms", "cpu_ms", "memory_peak_bytes", "output_bytes")), acc


def test_bash_and_sh(v1):
    out = run(v1, language="bash", code='echo "bash ${BASH_VERSION%%.*}"; exit 0')
    assert out["exit_code"] == 0 and out["stdout"].startswith("bash ") and out["stdout"].strip() != "bash", out
    out = run(v1, language="sh", code="echo from-sh; exit 4")
    assert out["exit_code"] == 4 and out["status"] == "error" and out["stdout"] == "from-sh\n"


def test_code_blocks_stop_at_first_failure(v1):
    out = run(v1, code_blocks=[
        {"language": "python", "code": "print('one')"},
        {"language": "bash", "code": "echo two; exit 2"},
        {"language": "python", "code": "print('three')"},
    ])
    assert out["exit_code"] == 2 and out["status"] == "error"
    assert [b["exit_code"] for b in out["blocks"]] == [0, 2]
    assert [b["language"] for b in out["blocks"]] == ["python", "bash"]
    assert "one" in out["output"] and "two" in out["output"] and "three" not in out["output"]
    assert "one" in out["blocks"][0]["output"] and "two" in out["blocks"][1]["output"]


def test_blocks_share_files_not_state(v1):
    out = run(v1, code_blocks=[
        {"language": "python", "code": "x = 1\nopen('shared.txt', 'w').write('S')"},
        {"language": "sh", "code": "cat shared.txt"},
        {"language": "python", "code": "print('x' in dir())"},
    ])
    assert out["exit_code"] == 0, out
    assert out["blocks"][1]["output"] == "S"
    assert out["blocks"][2]["output"].strip() == "False"


def test_sys_exit(v1):
    out = run(v1, language="python", code="import sys\nprint('bye')\nsys.exit(3)")
    assert out["exit_code"] == 3 and out["status"] == "error" and out["stdout"] == "bye\n"


def test_exception(v1):
    out = run(v1, language="python", code="def f():\n    raise ValueError('bad value')\nf()")
    assert out["exit_code"] == 1 and out["status"] == "error"
    assert "Traceback (most recent call last)" in out["output"]
    assert "ValueError: bad value" in out["output"] and "ValueError: bad value" in out["stderr"]
    assert "\x1b" not in out["output"] and "\x1b" not in out["stderr"], "terminal colours in a run's traceback"


def test_timeout(v1):
    t0 = time.monotonic()
    out = run(v1, language="python", code="import time\nprint('start', flush=True)\ntime.sleep(30)", timeout_s=1)
    assert time.monotonic() - t0 < 15
    assert out["exit_code"] == 124 and out["status"] == "timeout" and out["timed_out"] is True
    assert out["output"].rstrip().endswith("Timeout"), out["output"]
    assert "start" in out["output"]


def test_files_in_and_out(v1):
    out = run(v1, language="python",
              code="data = open('in/data.txt').read()\nopen('out.txt', 'w').write(data.upper())\n"
                   "open('/tmp/bin.out', 'wb').write(bytes(range(256)))",
              files={"in/data.txt": base64.b64encode(b"some data").decode()},
              fetch_files=["out.txt", "/tmp/bin.out"])
    assert out["exit_code"] == 0, out
    assert base64.b64decode(out["files"]["out.txt"]) == b"SOME DATA"
    assert base64.b64decode(out["files"]["/tmp/bin.out"]) == bytes(range(256))


def test_stdin(v1):
    out = run(v1, language="python", code="import sys\nprint(sys.stdin.read().upper())", stdin="lower")
    assert out["stdout"] == "LOWER\n"


def test_max_output(v1):
    out = run(v1, language="python", code="print('x' * 100000)\nprint('tail')", max_output=1000)
    assert out["truncated"] is True
    assert len(out["output"]) <= 1000 + 200, len(out["output"])
    assert len(out["stdout"]) <= 1000 + 200


def test_memory_limit(v1):
    out = run(v1, language="python", code="b = bytearray(300 << 20)\nprint('allocated')", memory_mb=128)
    assert out["exit_code"] != 0 and "allocated" not in out["stdout"], out


def test_runs_leave_nothing(v1):
    before = len(v1.sandboxes())
    run(v1, language="python", code="print(1)")
    run(v1, language="sh", code="exit 9")
    assert len(v1.sandboxes()) == before
    assert len(v1.client.get("api/kernels").json()) == before


def test_each_run_is_fresh(v1):
    run(v1, language="sh", code="echo mark > /workspace/mark; echo mark > /tmp/mark")
    out = run(v1, language="sh", code="ls /workspace/mark /tmp/mark 2>&1; exit 0")
    assert "No such file" in out["output"] and "mark\n" not in out["stdout"], out


def test_bad_requests(v1):
    assert_v1_error(v1.post("v1/run", json={}), 400, "code")
    assert_v1_error(v1.post("v1/run", json={"language": "cobol", "code": "x"}), 400, "language")
    assert_v1_error(v1.post("v1/run", json={"language": "python", "code": 1}), 400, "code")
    assert_v1_error(v1.post("v1/run", json={"language": "python", "code": "1", "extra": 1}), 400, "unknown field 'extra'")
    assert_v1_error(v1.post("v1/run", json={"code_blocks": [{"language": "python"}]}), 400, "code")
    assert_v1_error(v1.post("v1/run", json={"code_blocks": [{"language": "python", "code": "1", "x": 1}]}), 400, "x")
    assert_v1_error(v1.post("v1/run", json={"language": "python", "code": "1", "files": {"a": "!!not base64!!"}}),
                 400, "files")
    assert_v1_error(v1.post("v1/run", json={"language": "python", "code": "1", "timeout_s": -1}), 400, "timeout_s")
    assert_v1_error(v1.post("v1/run", data="{", headers={"Content-Type": "application/json"}), 400)
    assert_v1_error(v1.post("v1/run", json={"language": "python", "code": "print(1)", "files": {"../x": "eA=="}}), 400)
    assert_v1_error(v1.post("v1/run", json={"language": "python", "code": "1", "fetch_files": "out.txt"}), 400,
                 "fetch_files")
    expect(v1.get("v1/sandboxes"), 200)


def test_code_without_language(v1):
    """`code` without `language`: refused (400 naming language) or run as Python; never an "ok"
    that ran nothing."""
    r = v1.post("v1/run", json={"code": "print('ran')"})
    if r.status_code == 400:
        assert_v1_error(r, 400, "language")
    else:
        assert r.status_code == 200 and r.json()["stdout"] == "ran\n", r.text
