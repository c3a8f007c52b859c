"""IPython's InteractiveShell, wired to publish on iopub the way ipykernel's ZMQInteractiveShell
does (ipykernel/zmqshell.py, displayhook.py), but through our channel and with no threads.

Differences from a terminal IPython, all taken from ZMQInteractiveShell:
  - display() / figures -> display_data; last expression -> execute_result; tracebacks -> error
  - `?` help, set_next_input, exit -> execute_reply payloads
  - no autoindent, no virtualenv detection, PAGER=cat
One deliberate difference from ZMQInteractiveShell: `!cmd` runs through system_raw, so the child
writes straight into our fd 1/2 pipes (the daemon streams them) instead of through a pty.
"""
import os
import sys

from IPython.core import page, payloadpage
from IPython.core.autocall import ZMQExitAutocall
from IPython.core.displayhook import DisplayHook
from IPython.core.displaypub import DisplayPublisher
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell, InteractiveShellABC
from IPython.core.usage import default_banner
from IPython.paths import get_ipython_package_dir
from pickleshare import PickleShareDB
from traitlets import Any, CBool, Instance, Type, default
from traitlets.config import Config

from .charts import register_chart_formatter
from .compiler import CellCompiler
from .fast_paths import CellDisplayFormatter, CellTransformerManager, input_ends_with_semicolon


class CellboxDisplayPublisher(DisplayPublisher):
    """display() and friends -> display_data / update_display_data / clear_output.
    (Kernel.send flushes stdout/stderr first, so prints before a display stay before it.)"""

    def publish(self, data, metadata=None, source=None, *, transient=None, update=False,
                **kwargs):
        metadata = {} if metadata is None else metadata
        transient = {} if transient is None else transient
        self._validate_data(data, metadata)
        content = {"data": data, "metadata": metadata, "transient": transient}
        msg_type = "update_display_data" if update else "display_data"
        self.shell.kernel.publish(msg_type, content)

    def clear_output(self, wait=False):
        self.shell.kernel.publish("clear_output", {"wait": wait})


class CellboxDisplayHook(DisplayHook):
    """The value of a cell's last expression -> execute_result (only if it has a repr)."""

    def start_displayhook(self):
        self.content = {"data": {}, "metadata": {}}

    def write_output_prompt(self):
        self.content["execution_count"] = self.prompt_count

    def write_format_data(self, format_dict, md_dict=None):
        self.content["data"] = format_dict
        self.content["metadata"] = md_dict

    quiet = input_ends_with_semicolon

    def finish_displayhook(self):
        content, self.content = self.content, None
        if content["data"]:
            self.shell.kernel.publish("execute_result", content)


class ZMQInteractiveShell(InteractiveShell):
    """ipykernel's shell class name, kept on purpose: libraries detect a notebook frontend by
    `get_ipython().__class__.__name__ == "ZMQInteractiveShell"` (rich, plotly, tqdm, ...)
    and only then send the rich display_data they would send under ipykernel."""

    displayhook_class = Type(CellboxDisplayHook)
    display_pub_class = Type(CellboxDisplayPublisher)
    kernel = Any()              # the Kernel whose iopub this shell publishes on
    input_transformer_manager = Instance(CellTransformerManager, ())
    readline_use = CBool(False)
    autoindent = CBool(False)   # meaningless without a terminal
    exiter = Any()

    @default("exiter")
    def _default_exiter(self):
        return ZMQExitAutocall(self)

    @default("banner1")
    def _default_banner1(self):
        return default_banner

    keepkernel_on_exit = None
    _db = None       # see db below
    _db_path = None

    def init_display_formatter(self):
        self.display_formatter = CellDisplayFormatter(parent=self)
        # A figure also goes out as a structured chart (E2B's result.chart), as E2B's kernel
        # does; registered by name, so it costs nothing until a figure is shown.
        register_chart_formatter(self.display_formatter)
        self.configurables.append(self.display_formatter)

    def init_environment(self):
        # As ZMQInteractiveShell: children see no terminal, so colour hints on and no pagers.
        os.environ["TERM"] = "xterm-color"
        os.environ["CLICOLOR"] = "1"
        os.environ["PAGER"] = "cat"
        os.environ["GIT_PAGER"] = "cat"

    def init_hooks(self):
        super().init_hooks()
        # `obj?` and %page go to the execute_reply payload, where frontends show them.
        self.set_hook("show_in_pager", page.as_hook(payloadpage.page), 99)

    def init_virtualenv(self):
        # A kernel runs the Python it was started with; VIRTUAL_ENV in its environment is noise.
        pass

    def enable_gui(self, gui=None):
        # There is no GUI event loop to integrate: only inline figures make sense here.
        if gui not in (None, "inline"):
            raise UsageError(f"GUI event loop '{gui}' is not supported in a cellbox kernel; "
                             "use %matplotlib inline")
        self.active_eventloop = gui

    def ask_exit(self):
        self.exit_now = not self.keepkernel_on_exit
        self.payload_manager.write_payload({"source": "ask_exit",
                                            "keepkernel": self.keepkernel_on_exit})

    def set_next_input(self, text, replace=False):
        self.payload_manager.write_payload({"source": "set_next_input", "text": text,
                                            "replace": replace})

    def run_cell(self, *args, **kwargs):
        self._last_traceback = None
        return super().run_cell(*args, **kwargs)

    def _showtraceback(self, etype, evalue, stb):
        self.kernel.publish("error", {"traceback": stb, "ename": str(etype.__name__),
                                      "evalue": str(evalue)})
        self._last_traceback = stb

    system = InteractiveShell.system_raw

    @property
    def db(self):
        """IPython's PickleShareDB (%store, %bookmark), opened on first use: its code (and
        pathlib's) would otherwise run for the first time in every new kernel, whose pages are
        each a trap at that moment on the dev VM, for a database most kernels never open."""
        if self._db is None and self._db_path is not None:
            self._db = PickleShareDB(self._db_path)
        return self._db

    @db.setter
    def db(self, value):  # InteractiveShell.init_db's
        self._db = value

    def adopt(self, kernel):
        """In a kernel forked from the zygote, take over the shell the zygote built: redo what
        belongs to this process (its kernel, environment, home and profile directories, the
        streams stdio.install() put in place), keep the rest (magics, formatters, compiled
        caches) as the zygote left it, shared copy-on-write."""
        self.kernel = kernel
        self.init_environment()
        if self._make_profile_directories():
            # The database's directory is made with the others; the database opens when used.
            self._db, self._db_path = None, os.path.join(self.profile_dir.location, "db")
        else:
            self.init_ipython_dir(None)
            self.init_profile_dir(None)
            self.db = PickleShareDB(os.path.join(self.profile_dir.location, "db"))
        self.starting_dir = os.getcwd()
        self.tempfiles = []
        self.tempdirs = []
        self.init_encoding()
        self.save_sys_module_state()
        self.init_pushd_popd_magic()
        # init_logger() would make the same idle Logger the zygote's shell holds (no log was
        # started there), but for the home directory: ~0.5 ms of first-run code per kernel.
        self.logger.home_dir = self.home_dir

    def _make_profile_directories(self):
        """What init_ipython_dir() and init_profile_dir() make for a kernel whose IPYTHONDIR
        does not exist yet (the daemon's default, in the sandbox's own /tmp): the same
        directories, modes and README, made directly, and the prebuilt shell's ProfileDir
        pointed at them. IPython's own code for this (traitlets observers, every directory
        checked twice) cost ~4 ms of a new kernel's start here, most of it the first run of that
        code in the process. False (nothing done) for anything else, such as a user's IPYTHONDIR
        that exists: IPython's own way then."""
        ipython_dir = os.environ.get("IPYTHONDIR", "")
        profile = self.profile_dir
        if not os.path.isabs(ipython_dir) or profile is None or os.path.lexists(ipython_dir):
            return False
        ipython_dir = os.path.normpath(ipython_dir)
        location = os.path.join(ipython_dir, "profile_default")
        paths = {name: os.path.join(location, getattr(profile, name + "_name"))
                 for name in ("security_dir", "log_dir", "startup_dir", "pid_dir", "static_dir")}
        try:
            os.mkdir(ipython_dir)                     # paths.get_ipython_dir (its parent exists)
            os.mkdir(location, 0o755)                 # utils.path.ensure_dir_exists
            os.mkdir(paths["security_dir"], 0o700)    # ProfileDir.check_dirs()
            os.mkdir(paths["log_dir"])
            os.mkdir(paths["pid_dir"], 0o700)
            os.mkdir(paths["startup_dir"])
            _copy_small_file(_README_STARTUP, os.path.join(paths["startup_dir"], "README"))
            os.mkdir(os.path.join(location, "db"))    # InteractiveShell.init_db (PickleShareDB)
        except OSError:
            return False  # IPython's way takes it from there (it makes only what is missing)
        # Set without the observers: they would make and check the same directories again.
        self._trait_values["ipython_dir"] = ipython_dir
        profile._trait_values.update(paths, location=location)
        return True


InteractiveShellABC.register(ZMQInteractiveShell)


# The README IPython copies into a new profile's startup directory; found once, in the zygote.
_README_STARTUP = os.path.join(get_ipython_package_dir(), "core", "profile", "README_STARTUP")


def _copy_small_file(source, target):
    """shutil.copy() for a file of a few hundred bytes, with the system calls only (shutil's
    Python code would be run for the first time in the process, at a kernel's start)."""
    source_fd = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(source_fd, 1 << 16)
        mode = os.fstat(source_fd).st_mode & 0o7777
    finally:
        os.close(source_fd)
    target_fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        os.write(target_fd, data)
    finally:
        os.close(target_fd)


def shell_config():
    config = Config()
    # IPython's history saves from a thread; a kernel that is forked must have none.
    config.HistoryManager.enabled = False
    return config


def create_shell(kernel):
    """The process's one shell (a singleton: get_ipython() and display() find it): the one the
    zygote built ahead of time (prebuild_shell) if this process was forked from it, else new."""
    if ZMQInteractiveShell.initialized():
        shell = ZMQInteractiveShell.instance()
        shell.adopt(kernel)
        return shell
    return ZMQInteractiveShell.instance(config=shell_config(), kernel=kernel,
                                        compiler_class=CellCompiler)


class _DiscardingKernel:
    """The prebuilt shell's kernel until a real one adopts it: the zygote's warm-up output goes
    nowhere."""

    def publish(self, msg_type, content, metadata=None):
        pass


def prebuild_shell(ipython_dir):
    """In the zygote: build the shell once (about 55 ms of traitlets and magics that every kernel
    would otherwise repeat) and run what a kernel's first cells run — a traceback (pygments,
    stack_data: ~75 ms the first time) and a rich display — so that their caches are built here
    too. `ipython_dir` is a scratch directory: the profile the shell creates must not land in
    the host's home; adopt() makes the kernel's own."""
    saved = os.environ.get("IPYTHONDIR")
    os.environ["IPYTHONDIR"] = ipython_dir
    try:
        shell = create_shell(_DiscardingKernel())
    finally:
        if saved is None:
            del os.environ["IPYTHONDIR"]
        else:
            os.environ["IPYTHONDIR"] = saved
    shell.run_cell("None", store_history=False, silent=True)
    shell.run_cell("1 / 0", store_history=False)
    pandas = sys.modules.get("pandas")
    if pandas is not None:
        shell.display_formatter.format(pandas.DataFrame({"a": [1, 2], "b": ["x", "y"]}))
    # Nothing of the warm-up may be visible to a kernel: %tb and %debug read these.
    sys.last_type = sys.last_value = sys.last_traceback = None
    shell._last_traceback = None  # noqa: SLF001
    shell.kernel = None
    return shell


def add_working_directory_to_path():
    """'' on sys.path before site-packages, as IPython's InteractiveShellApp.init_path does for
    ipykernel: modules the user writes to the working directory are importable."""
    if "" in sys.path:
        return
    index = 0
    for i, path in enumerate(sys.path):
        if os.path.basename(path) in ("site-packages", "dist-packages"):
            index = i
            break
    sys.path.insert(index, "")


def use_interruptible_pdb():
    """As ipykernel's init_pdb: a debugger that SIGINT can leave without wedging the kernel."""
    import pdb

    from IPython.core import debugger
    debugger.Pdb = debugger.InterruptiblePdb
    pdb.Pdb = debugger.Pdb
    pdb.set_trace = debugger.set_trace


def enable_inline_figures(shell):
    """pyplot was imported in the zygote, before any shell existed, so matplotlib_inline could
    not hook figures into the shell then (ipykernel's order is the other way round): hook them
    now, as its import would have."""
    backend_inline = sys.modules.get("matplotlib_inline.backend_inline")
    if backend_inline is None or shell is None or getattr(shell, "_cellbox_inline_figures", False):
        return  # done already: in the zygote, on the shell this kernel adopted
    backend_inline._enable_matplotlib_integration()  # noqa: SLF001
    shell._cellbox_inline_figures = True  # noqa: SLF001
