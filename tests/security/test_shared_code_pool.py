"""Class 2, in memory: code shared between sandboxes, on pages of the host's hugetlb pool. With
--huge-code-pages and hugetlb pages free, the zygote copies the library code every kernel runs
onto those, in a memfd sealed against writes and mapped shared by the zygote and all its kernels
(src/runtime/huge_code.h). A write there would reach every kernel, so a kernel must not be able
to make that code writable at all. This module reserves the pool pages for its daemons and gives
them back after (the exec mode has no zygote, and checks the same of the files' pages)."""
import re

import pytest

from seclib import LIBPYTHON_HEADER

pytestmark = pytest.mark.cellbox_only

DAEMON_ARGS = ["--huge-code-pages=true"]
NR_HUGEPAGES = "/proc/sys/vm/nr_hugepages"


@pytest.fixture(scope="module", autouse=True)
def hugetlb_pool():
    """Before the module's daemons (autouse: set up ahead of `box`), given back after them."""
    with open(NR_HUGEPAGES) as f:
        before = int(f.read())
    try:
        with open(NR_HUGEPAGES, "w") as f:
            f.write(str(before + 8))
    except OSError as error:
        pytest.skip(f"cannot reserve hugetlb pages: {error}")
    yield
    with open(NR_HUGEPAGES, "w") as f:
        f.write(str(before))


def test_the_shared_library_code_cannot_be_made_writable(box, fresh):
    """A kernel that tries to make the code it shares with the zygote and its neighbours
    writable (mprotect) is refused (EACCES: the memfd is sealed) and writes nothing: the
    zygote's page, a neighbour's and the next kernel's still hold libpython's ELF header, and
    the kernel runs on."""
    k = fresh()
    got = k.json(LIBPYTHON_HEADER + """
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_result = {'base': _base, 'before': ctypes.string_at(_base, 4).hex(),
           'mprotect': _libc.mprotect(_base, 4096, 3)}
_result['errno'] = ctypes.get_errno()
if _result['mprotect'] == 0:
    ctypes.memmove(_base + 1, b'PWN', 3)
_result['after'] = ctypes.string_at(_base, 4).hex()
_result['mapped_from'] = [line.split()[5:] for line in open('/proc/self/maps')
                          if int(line.split('-')[0], 16) <= _base < int(line.split()[0].split('-')[1], 16)]
""")
    header = b"\x7fELF".hex()
    assert got["before"] == header, got
    k.ok("print(sum(range(10)))")  # the kernel runs on
    if box.mode == "zygote":
        shared = re.search(r"shares (\d+) MiB of code on 2 MiB pages \((\d+) MiB from the hugetlb pool\)",
                           box.daemon.log_text())
        assert shared and int(shared.group(2)) >= 2, box.daemon.log_tail()
        assert got["mapped_from"] == [["/memfd:cellbox-huge-code", "(deleted)"]], got["mapped_from"]
        assert got["mprotect"] == -1 and got["errno"] == 13, got  # EACCES
        assert got["after"] == header, got  # nothing written
        zygote = int(re.findall(r"zygote ready \(pid (\d+)", box.daemon.log_text())[-1])
        with open(f"/proc/{zygote}/mem", "rb") as mem:
            mem.seek(got["base"])
            assert mem.read(4) == b"\x7fELF"
    else:  # the file's own pages: a private copy, as in test_shared_code
        assert got["mprotect"] == 0 and got["after"] == b"\x7fPWN".hex(), got
    for other in (box.neighbour, fresh()):
        seen = other.json(LIBPYTHON_HEADER + "_result = [_base, ctypes.string_at(_base, 4).hex()]")
        assert seen[1] == header, seen
        if box.mode == "zygote":
            assert seen[0] == got["base"]  # the same address: the same shared page
    box.assert_contained()
