"""The E2B walkthrough the project started from (shared/seeds 002: quick start, upload a file,
install a package, analyse data with AI), end to end through E2B's official SDK unchanged
(tests/clients/node/e2b_walkthrough.mjs) against a daemon this module starts:

Sandbox.create -> runCode keeps state -> files.write("/home/user/upload.txt") read back by the
kernel -> commands.run("pip install cowsay"), which fails with CommandExitError and output that
says the sandbox has no network (until sandboxes have one) -> a CSV uploaded to a relative path
and analysed with pandas, its matplotlib bar chart back as a PNG and as result.chart -> kill."""
import pytest

from helpers.node_clients import run_e2b_script

pytestmark = pytest.mark.cellbox_only  # Jupyter Server has no E2B API


@pytest.fixture(scope="module")
def walkthrough(daemon):
    _, steps, detail = run_e2b_script(daemon, "e2b_walkthrough.mjs")
    return steps, detail


def test_every_step_ran_and_passed(walkthrough):
    steps, detail = walkthrough
    expected = ["create", "run_code", "upload", "pip_install", "analyse_csv", "kill"]
    assert [s for s in expected if s not in steps] == [], detail
    assert {name: s for name, s in steps.items() if not s["ok"]} == {}, detail


def test_state_and_the_uploaded_file(walkthrough):
    steps, detail = walkthrough
    assert steps["run_code"]["text"] == "42", detail
    assert steps["upload"]["path"] == "/home/user/upload.txt", detail
    assert steps["upload"]["stdout"] == "hello from the walkthrough\n", detail


def test_pip_install_says_there_is_no_network(walkthrough):
    steps, detail = walkthrough
    pip = steps["pip_install"]
    assert pip["name"] == "CommandExitError" and pip["exit_code"] not in (0, None), detail
    output = (pip["stdout"] + pip["stderr"]).lower()
    assert "network" in output, detail
    assert "externally-managed-environment" not in output, detail  # PEP 668 is not the answer


def test_the_csv_is_analysed_with_a_chart(walkthrough):
    steps, detail = walkthrough
    analysis = steps["analyse_csv"]
    assert analysis["error"] is None, detail
    assert float(analysis["text"]) == pytest.approx((2148000 + 3645000 + 3223000 + 2873000) / 4)
    assert analysis["png_bytes"] > 1000, detail
    assert analysis["chart_type"] == "bar" and analysis["chart_title"] == "Population", detail
    assert analysis["chart_labels"] == ["Paris", "Berlin", "Madrid", "Rome"], detail
    assert analysis["chart_values"] == [2148000, 3645000, 3223000, 2873000], detail


def test_the_sandbox_is_gone_after_kill(walkthrough):
    steps, detail = walkthrough
    assert steps["kill"]["running"] is False, detail
