"""The zygote's Python half: import the template's preload list once, then prepare each forked
child to become a kernel of its own.

src/runtime/zygote.c calls preload() once in the zygote and after_fork() in every new kernel
process (inside its sandbox, after the fork), then main.run(). Nothing here may leave a thread
running: the zygote forks, and only the forking thread survives a fork.
"""
import gc
import importlib
import os
import shutil
import sys
import tempfile

# Every module the kernel itself uses, so a forked kernel never imports from the host path
# (which does not exist inside the sandbox).
_OWN_MODULES = ("main", "channel", "charts", "compiler", "interrupts", "kernel", "requests",
                "session", "script", "shell", "fast_paths", "stdin", "stdio", "user_site")


def preload(modules, inside_python_dir):
    """Imports `modules` (e.g. numpy, pandas, matplotlib, IPython) and our package. Returns the
    list of modules that failed to import, with the reason, so the daemon can log it."""
    failed = []
    for name in _OWN_MODULES:
        importlib.import_module(f"cellbox_kernel.{name}")
    for name in modules:
        try:
            importlib.import_module(name)
            if name == "matplotlib":
                _preload_matplotlib()
        except Exception as error:  # a missing optional package must not stop the zygote
            failed.append(f"{name}: {error}")
    _warm_ipython()
    try:
        _prebuild_shell()
    except Exception as error:  # kernels then build their own shell, as exec'd ones do
        failed.append(f"the prebuilt IPython shell: {error!r}")
    # The kernel package must be found inside the sandbox too (for anything imported lazily):
    # a package finds its submodules through its own __path__, not sys.path.
    sys.path[0] = inside_python_dir
    sys.modules["cellbox_kernel"].__path__ = [os.path.join(inside_python_dir, "cellbox_kernel")]
    # Objects that exist now never need collecting in a child: freezing them keeps the
    # collector from touching (and so copying) their pages after each fork.
    gc.collect()
    gc.freeze()
    return failed


def _preload_matplotlib():
    # Importing pyplot and the inline backend builds the font list once, here, instead of in
    # every sandbox (about a second each).
    import matplotlib.pyplot  # noqa: F401
    import matplotlib_inline.backend_inline  # noqa: F401
    from matplotlib import font_manager
    font_manager.fontManager  # noqa: B018  (loaded at import; touched so it is really there)


def _warm_ipython():
    # The parts of IPython a kernel uses first: the debugger (for %debug), the completer.
    import pdb  # noqa: F401

    import IPython.core.completer  # noqa: F401
    import IPython.core.debugger  # noqa: F401
    import IPython.core.oinspect  # noqa: F401



_SCRATCH_PREFIX = "cellbox-zygote-ipython-"


def make_scratch(purpose):
    """A scratch directory of this zygote's; its name carries our pid (see _remove_stale_scratch)."""
    return tempfile.mkdtemp(prefix=f"{_SCRATCH_PREFIX}{os.getpid()}-{purpose}-")


def remove_scratch(path):
    shutil.rmtree(path, ignore_errors=True)


def _prebuild_shell():
    from .shell import enable_inline_figures, prebuild_shell, use_interruptible_pdb
    use_interruptible_pdb()  # before the shell exists: its traceback handlers take the class
    _remove_stale_scratch()
    scratch = make_scratch("shell")
    try:
        shell = prebuild_shell(scratch)
    finally:
        remove_scratch(scratch)
    enable_inline_figures(shell)  # once here: every kernel adopting the shell has it


def _remove_stale_scratch():
    """A zygote killed while it preloads leaves its scratch directory behind: remove those of
    zygotes that are gone (the directory's name carries the pid)."""
    root = tempfile.gettempdir()
    for name in os.listdir(root):
        pid = name[len(_SCRATCH_PREFIX):].split("-", 1)[0] if name.startswith(_SCRATCH_PREFIX) else ""
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def threads_alive():
    """Threads of this process (the zygote must have exactly one before it forks)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def after_fork(environment, kernel_id):
    """In a new kernel process: its own environment and fresh randomness."""
    os.environ.clear()          # also unsetenv()s, so child processes see the same
    for entry in environment:
        name, _, value = entry.partition("=")
        os.environ[name] = value
    _reseed()
    _clear_inherited_caches()


def _reseed():
    """Copies of one process share its random state: two sandboxes must never produce the
    same stream, so every generator we know of starts again from the OS's entropy."""
    import random
    random.seed()  # the module-level functions' instance (random._inst)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        # The legacy global RandomState, as numpy.random.seed() leaves it (the first word only
        # its top bit, so the state is never all zeros; the other 623 from entropy), but with
        # the words straight from the OS rather than through a SeedSequence: ~1.5 instead of
        # ~3.7 ms in a new kernel here, most of it the first touch of SeedSequence's pages.
        key = numpy.frombuffer(bytearray(os.urandom(624 * 4)), dtype=numpy.uint32)
        key[0] = 0x80000000
        numpy.random.set_state(("MT19937", key, 624, 0, 0.0))
    tempfile = sys.modules.get("tempfile")
    if tempfile is not None:
        tempfile._name_sequence = None  # noqa: SLF001  (re-created lazily, newly seeded)
        tempfile.tempdir = None  # the zygote's choice was made outside the sandbox


def _clear_inherited_caches():
    matplotlib = sys.modules.get("matplotlib")
    if matplotlib is not None:
        # matplotlib cached the zygote's directories (host paths) for good; inside the sandbox
        # they are MPLCONFIGDIR's.
        directory = os.environ.get("MPLCONFIGDIR", "/tmp/.config/matplotlib")

        def made_on_first_use():
            # As matplotlib's own: made when asked for. Most kernels never ask (its fonts and
            # rc file were read in the zygote), and making it costs a new kernel ~0.8 ms here.
            os.makedirs(directory, exist_ok=True)
            return directory

        matplotlib.get_configdir = matplotlib.get_cachedir = made_on_first_use
