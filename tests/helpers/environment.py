"""The environment the tests run in and give to what they start, whatever the caller exported.

A developer's shell carries variables that change what a test sees without any change in
cellbox: CELLBOX_* settings that cellboxd, the CLI and the Python client read (a port, a token, a
URL); proxies that send requests for 127.0.0.1 elsewhere (requests, urllib and libcurl honour
http_proxy); BLAS and OpenMP thread counts (OpenBLAS starts a thread per core unless told
otherwise); a locale; PYTHON* variables and a HOME whose ~/.local packages a Python started by a
test would import; Jupyter and IPython directories; sanitizer options.

scrub_session() runs once, when pytest loads tests/conftest.py: it takes those out of os.environ
(or sets them to one known value), so the tests' own clients and every process a test starts with
the inherited environment see none of them. daemon_environ() and kernel_environ() build
cellboxd's and a kernel's environment from nothing but what each needs.
"""
import atexit
import os
import shutil
import tempfile

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# The CELLBOX_* variables that say which build the tests run against (tests/conftest.py): kept.
TEST_SETTINGS = ("CELLBOX_BUILD", "CELLBOX_DAEMON", "CELLBOX_TEST_REFERENCE", "CELLBOX_OPENAPI")

# One thread for BLAS and OpenMP, as cellboxd gives its kernels and zygotes (src/kernel/).
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

# Names (or, ending in "*", prefixes) taken out of the session's environment.
DROPPED = ("CELLBOX_*", "http_proxy", "https_proxy", "ftp_proxy", "all_proxy", "no_proxy",
           "HTTP_PROXY", "HTTPS_PROXY", "FTP_PROXY", "ALL_PROXY", "NO_PROXY",
           "OPENBLAS_*", "OMP_*", "MKL_*", "GOTO_NUM_THREADS", "LC_*", "LANGUAGE",
           "PYTHON*", "JUPYTER_*", "IPYTHONDIR", "MPLBACKEND", "MPLCONFIGDIR", "XDG_*",
           "PIP_*", "NODE_OPTIONS", "NODE_PATH",
           "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "FORCE_COLOR", "NO_COLOR")

# Sanitizer options for an ASan/UBSan cellboxd: leaks reported, a stack with each UB report.
SANITIZER_OPTIONS = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0",
                     "UBSAN_OPTIONS": "print_stacktrace=1"}


def _dropped(name):
    if name in TEST_SETTINGS:
        return False
    return any(name.startswith(entry[:-1]) if entry.endswith("*") else name == entry
               for entry in DROPPED)


def _temporary_home():
    home = tempfile.mkdtemp(prefix="cellbox-test-home-")
    atexit.register(shutil.rmtree, home, True)
    return home


def scrub_session():
    """Take the caller's variables that matter out of os.environ; give the session its own HOME
    (removed at exit), one locale and one BLAS/OpenMP thread."""
    for name in [name for name in os.environ if _dropped(name)]:
        del os.environ[name]
    os.environ.update({"HOME": _temporary_home(), "LANG": "C.UTF-8", "TERM": "dumb", **ONE_THREAD})


def daemon_environ(home, extra=None):
    """cellboxd's environment: a system PATH, `home`, a locale, the sanitizer options, then
    `extra` (a test's own variables) over them."""
    env = {"PATH": SYSTEM_PATH, "HOME": home, "LANG": "C.UTF-8", **SANITIZER_OPTIONS}
    env.update(extra or {})
    return env


def kernel_environ(home):
    """What cellboxd gives a kernel (src/kernel/kernel.c, build_environment), with HOME and the
    IPython, matplotlib and cache directories in `home` instead of a sandbox's /workspace."""
    return {"PATH": f"{home}/.local/bin:/usr/local/bin:/usr/bin:/bin", "HOME": home, "USER": "user", "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1", "MPLBACKEND": "module://matplotlib_inline.backend_inline",
            "MPLCONFIGDIR": os.path.join(home, ".config", "matplotlib"),
            "IPYTHONDIR": os.path.join(home, ".ipython"), "XDG_CACHE_HOME": os.path.join(home, ".cache"),
            **ONE_THREAD}
