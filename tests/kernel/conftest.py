"""What the kernel tests share: cellbox-kernel built once, and one kernel a module (a test file
that needs a fresh kernel for each test defines its own `kernel`)."""
import pytest

from kernel_process import ensure_built, started_kernel


@pytest.fixture(scope="session", autouse=True)
def built():
    ensure_built()


@pytest.fixture(scope="module")
def kernel():
    yield from started_kernel()
