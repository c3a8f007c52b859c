"""Class 2, in memory: code shared between sandboxes. With --huge-code-pages the zygote moves the
library code every kernel runs onto huge pages that the zygote and all its kernels share
(src/runtime/huge_code.h); as with the files' own pages, a kernel that makes that code writable
and writes into it must change only its own copy. This module's daemons run with the option on
(the exec mode has no zygote, and checks the same of the files' pages)."""
import pytest

from helpers import hugetlb
from seclib import ELF_HEADER, REWRITE_LIBPYTHON_HEADER, assert_libpython_header_intact, zygote_bytes

pytestmark = pytest.mark.cellbox_only

DAEMON_ARGS = ["--huge-code-pages=true"]


@pytest.fixture(scope="module", autouse=True)
def no_hugetlb_pages_free():
    """Transparent huge pages are what this module tests: where the host's hugetlb pool has
    pages free the zygote takes those instead (test_shared_code_pool.py tests that case)."""
    if hugetlb.pages_free():
        pytest.skip("this host's hugetlb pool has pages free (test_shared_code_pool.py)")


def test_rewriting_the_shared_library_code_changes_only_this_kernel(box, fresh):
    """A kernel that makes the code it shares with the zygote and its neighbours writable
    (mprotect) and writes into it changes its own copy only: the zygote's page, a neighbour's
    and the next kernel's still hold libpython's ELF header."""
    k = fresh()
    got = k.json(REWRITE_LIBPYTHON_HEADER)
    header = ELF_HEADER.hex()
    assert got["before"] == header and got["mprotect"] == 0, got
    assert got["after"] == b"\x7fPWN".hex(), got  # the write itself took, in this kernel
    k.ok("print(sum(range(10)))")  # and the kernel runs on
    if box.mode == "zygote":
        import re
        # The page written was the zygote's huge page, not a file's (an anonymous mapping).
        assert re.search(r"shares [1-9]\d* MiB of code on 2 MiB pages \(0 MiB from the hugetlb pool\)",
                         box.daemon.log_text())
        assert got["mapped_from"] == [[]], got["mapped_from"]
        assert zygote_bytes(box, got["base"], 4) == ELF_HEADER
    assert_libpython_header_intact(box, (box.neighbour, fresh()), got["base"])
    box.assert_contained()
