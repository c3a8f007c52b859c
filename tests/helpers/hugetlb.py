"""The host's hugetlb pool, for the tests of --huge-code-pages (src/runtime/huge_code.h): how many
of its pages are free, and pages reserved for a test and given back after it."""
import contextlib

import pytest

NR_HUGEPAGES = "/proc/sys/vm/nr_hugepages"
# Enough for every window the zygote moves (five with the default preload list).
PAGES_FOR_A_TEST = 8


def pages_free():
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("HugePages_Free:"))


@contextlib.contextmanager
def reserved_pages(count=PAGES_FOR_A_TEST):
    """`count` more pages in the pool while the block runs (skips the test where they cannot be
    reserved); the host's own number is written back after."""
    with open(NR_HUGEPAGES) as f:
        before = int(f.read())
    try:
        with open(NR_HUGEPAGES, "w") as f:
            f.write(str(before + count))
    except OSError as error:
        pytest.skip(f"cannot reserve hugetlb pages: {error}")
    try:
        yield
    finally:
        with open(NR_HUGEPAGES, "w") as f:
            f.write(str(before))
