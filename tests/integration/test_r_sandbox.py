"""R inside a sandbox: what IRkernel (Debian's r-cran-irkernel) needs from the sandbox's root.

The sandbox's /etc is generated (src/sandbox/rootfs.c); /usr/lib/R/etc links into /etc/R, so R
starts only when /etc/R is bound there (read-only). Plots go through R's cairo png device, with
no X display.
"""
import os

import pytest

from helpers.v1 import V1

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/bin/R"),
                                reason="r-base is not installed (scripts/install-deps.sh)")


@pytest.fixture(scope="module")
def sandbox(daemon):
    v1 = V1(daemon)
    sid = v1.create()["id"]
    yield v1, sid
    v1.cleanup()


def run(sandbox, cmd):
    v1, sid = sandbox
    return v1.command(sid, cmd, timeout=120)


def test_r_starts_in_a_sandbox(sandbox):
    ev = run(sandbox, "R --slave -e 'cat(1 + 1)'")
    assert ev[-1]["exit_code"] == 0, ev.stderr
    assert ev.stdout == "2"


def test_r_draws_a_png_without_a_display(sandbox):
    ev = run(sandbox, "env -u DISPLAY R --slave -e 'png(\"/tmp/plot.png\"); plot(1:10); "
                      "invisible(dev.off()); cat(file.size(\"/tmp/plot.png\") > 1000)'")
    assert ev[-1]["exit_code"] == 0, ev.stderr
    assert ev.stdout == "TRUE"


def test_irkernel_loads(sandbox):
    ev = run(sandbox, "R --slave -e 'suppressMessages(library(IRkernel)); cat(\"loaded\")'")
    assert ev[-1]["exit_code"] == 0, ev.stderr
    assert ev.stdout == "loaded"


def test_etc_r_is_read_only_and_the_hosts_is_untouched(sandbox):
    before = open("/etc/R/Renviron.site", "rb").read()
    ev = run(sandbox, "echo 'R_LIBS_USER=/tmp/evil' >> /etc/R/Renviron.site")
    assert ev[-1]["exit_code"] != 0
    assert "Read-only" in ev.stderr or "Permission denied" in ev.stderr, ev.stderr
    assert open("/etc/R/Renviron.site", "rb").read() == before
