"""Class 2, in memory: code shared between sandboxes, on pages of the host's hugetlb pool. With
--huge-code-pages and hugetlb pages free, the zygote copies the library code every kernel runs
onto those, in a memfd sealed against writes and mapped shared by the zygote and all its kernels
(src/runtime/huge_code.h). A write there would reach every kernel, so a kernel must not be able
to make that code writable at all. This module reserves the pool pages for its daemons and gives
them back after (the exec mode has no zygote, and checks the same of the files' pages)."""
import re

import pytest

from helpers import hugetlb
from seclib import ELF_HEADER, REWRITE_LIBPYTHON_HEADER, assert_libpython_header_intact, zygote_bytes

pytestmark = pytest.mark.cellbox_only

DAEMON_ARGS = ["--huge-code-pages=true"]


@pytest.fixture(scope="module", autouse=True)
def hugetlb_pool():
    """Before the module's daemons (autouse: set up ahead of `box`), given back after them."""
    with hugetlb.reserved_pages():
        yield


def test_the_shared_library_code_cannot_be_made_writable(box, fresh):
    """A kernel that tries to make the code it shares with the zygote and its neighbours
    writable (mprotect) is refused (EACCES: the memfd is sealed) and writes nothing: the
    zygote's page, a neighbour's and the next kernel's still hold libpython's ELF header, and
    the kernel runs on."""
    k = fresh()
    got = k.json(REWRITE_LIBPYTHON_HEADER)
    header = ELF_HEADER.hex()
    assert got["before"] == header, got
    k.ok("print(sum(range(10)))")  # the kernel runs on
    if box.mode == "zygote":
        shared = re.search(r"shares (\d+) MiB of code on 2 MiB pages \((\d+) MiB from the hugetlb pool\)",
                           box.daemon.log_text())
        assert shared and int(shared.group(2)) >= 2, box.daemon.log_tail()
        assert got["mapped_from"] == [["/memfd:cellbox-huge-code", "(deleted)"]], got["mapped_from"]
        assert got["mprotect"] == -1 and got["errno"] == 13, got  # EACCES
        assert got["after"] == header, got  # nothing written
        assert zygote_bytes(box, got["base"], 4) == ELF_HEADER
    else:  # the file's own pages: a private copy, as in test_shared_code
        assert got["mprotect"] == 0 and got["after"] == b"\x7fPWN".hex(), got
    assert_libpython_header_intact(box, (box.neighbour, fresh()), got["base"])
    box.assert_contained()
