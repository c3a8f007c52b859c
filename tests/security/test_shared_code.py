"""Class 2, in memory: code shared between sandboxes. With --huge-code-pages the zygote moves the
library code every kernel runs onto huge pages that the zygote and all its kernels share
(src/runtime/huge_code.h); as with the files' own pages, a kernel that makes that code writable
and writes into it must change only its own copy. This module's daemons run with the option on
(the exec mode has no zygote, and checks the same of the files' pages)."""
import pytest

from seclib import LIBPYTHON_HEADER

pytestmark = pytest.mark.cellbox_only

DAEMON_ARGS = ["--huge-code-pages=true"]


@pytest.fixture(scope="module", autouse=True)
def no_hugetlb_pages_free():
    """Transparent huge pages are what this module tests: where the host's hugetlb pool has
    pages free the zygote takes those instead (test_shared_code_pool.py tests that case)."""
    with open("/proc/meminfo") as f:
        free = next(int(line.split()[1]) for line in f if line.startswith("HugePages_Free:"))
    if free:
        pytest.skip("this host's hugetlb pool has pages free (test_shared_code_pool.py)")


def test_rewriting_the_shared_library_code_changes_only_this_kernel(box, fresh):
    """A kernel that makes the code it shares with the zygote and its neighbours writable
    (mprotect) and writes into it changes its own copy only: the zygote's page, a neighbour's
    and the next kernel's still hold libpython's ELF header."""
    k = fresh()
    got = k.json(LIBPYTHON_HEADER + """
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_result = {'base': _base, 'before': ctypes.string_at(_base, 4).hex(),
           'mprotect': _libc.mprotect(_base, 4096, 3) or ctypes.get_errno()}
if _result['mprotect'] == 0:
    ctypes.memmove(_base + 1, b'PWN', 3)
_result['after'] = ctypes.string_at(_base, 4).hex()
_result['mapped_from'] = [line.split()[5:] for line in open('/proc/self/maps')
                          if int(line.split('-')[0], 16) <= _base < int(line.split()[0].split('-')[1], 16)]
""")
    header = b"\x7fELF".hex()
    assert got["before"] == header and got["mprotect"] == 0, got
    assert got["after"] == b"\x7fPWN".hex(), got  # the write itself took, in this kernel
    k.ok("print(sum(range(10)))")  # and the kernel runs on
    if box.mode == "zygote":
        import re
        # The page written was the zygote's huge page, not a file's (an anonymous mapping).
        assert re.search(r"shares [1-9]\d* MiB of code on 2 MiB pages \(0 MiB from the hugetlb pool\)",
                         box.daemon.log_text())
        assert got["mapped_from"] == [[]], got["mapped_from"]
        zygote = int(re.findall(r"zygote ready \(pid (\d+)", box.daemon.log_text())[-1])
        with open(f"/proc/{zygote}/mem", "rb") as mem:
            mem.seek(got["base"])
            assert mem.read(4) == b"\x7fELF"
    for other in (box.neighbour, fresh()):
        seen = other.json(LIBPYTHON_HEADER + "_result = [_base, ctypes.string_at(_base, 4).hex()]")
        assert seen[1] == header, seen
        if box.mode == "zygote":
            assert seen[0] == got["base"]  # the same address: the same shared page
    box.assert_contained()
