"""Start and stop servers for the tests: cellboxd itself, and Debian's Jupyter Server (as a
gateway client of cellboxd, or as a reference server to check the tests themselves).

Every server gets a free port, its own token and its own temp directory; it is stopped by its
pid (then its process group, which it was started in), and its temp directory is removed.
Nothing is ever killed by name.
"""
import atexit
import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from .client import Client
from .environment import daemon_environ

SYSTEM_PYTHON = "/usr/bin/python3"
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "ERROR: UndefinedBehaviorSanitizer")


def built(*path):
    """A file of the build under test: $CELLBOX_BUILD/<path>, else <repo>/build/<path>."""
    build = os.environ.get("CELLBOX_BUILD") or os.path.join(REPO, "build")
    return os.path.abspath(os.path.join(build, *path))


def daemon_binary():
    """$CELLBOX_DAEMON, else $CELLBOX_BUILD/bin/cellboxd, else <repo>/build/bin/cellboxd."""
    path = os.environ.get("CELLBOX_DAEMON")
    return os.path.abspath(path) if path else built("bin", "cellboxd")


def cli_binary():
    """The command-line client: $CELLBOX_BUILD/bin/cellbox, else <repo>/build/bin/cellbox."""
    return built("bin", "cellbox")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_accepts(host, port):
    with contextlib.suppress(OSError):
        with socket.create_connection((host, port), timeout=0.5):
            return True
    return False


def mounts_under(root):
    """Mount points at or below root, deepest first (from /proc/self/mountinfo)."""
    root = os.path.realpath(root)
    found = []
    with contextlib.suppress(OSError):
        with open("/proc/self/mountinfo") as f:
            for line in f:
                point = line.split()[4].encode().decode("unicode_escape")
                if point == root or point.startswith(root + "/"):
                    found.append(point)
    return sorted(found, key=len, reverse=True)


def _pids_using(root):
    """Processes whose cwd lies under root or whose command line names it (what a daemon
    started in root, with --data-dir under root, may have left behind)."""
    found = []
    root = os.path.realpath(root)
    needle = root.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            cwd = os.readlink(f"/proc/{entry}/cwd")
            if cwd == root or cwd.startswith(root + "/"):
                found.append(int(entry))
                continue
        with contextlib.suppress(OSError):
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if needle in f.read():
                    found.append(int(entry))
    return found


_LIVE = set()  # servers started and not finished yet: stopped at exit whatever happens


def _stop_leftovers():
    for server in list(_LIVE):
        with contextlib.suppress(Exception):
            server.stop(timeout=5)
            server.remove_tmp()


atexit.register(_stop_leftovers)


def _sigterm_to_exit(signum, frame):
    # `timeout`, CI runners and people stop test runs with SIGTERM: turn it into what Ctrl-C
    # does (pytest stops the session and tears fixtures down; atexit then stops any server
    # left) instead of orphaning every daemon and Jupyter Server the run started.
    raise KeyboardInterrupt(f"terminated by signal {signum}")


if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
    signal.signal(signal.SIGTERM, _sigterm_to_exit)


def _cmdline(pid):
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    return "?"


class ServerProcess:
    """A server subprocess with a temp dir and a log file; stopped by pid."""

    name = "server"

    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix=f"cellbox-test-{self.name}-")
        self.log_path = os.path.join(self.tmp, f"{self.name}.log")
        self.proc = None
        self.stopped_by_us = False
        self.returncode = None
        self.done = False           # finished (stopped, checked, temp dir removed)
        self.leftover = []          # (pid, cmdline) still running after the server exited
        self.killed_after_timeout = False  # did not exit on SIGTERM in time: SIGKILLed

    def log_text(self):
        with contextlib.suppress(OSError):
            with open(self.log_path, "r", errors="replace") as f:
                return f.read()
        return ""

    def log_tail(self, n=4000):
        return self.log_text()[-n:]

    def _start(self, timeout):
        """Spawn with the subclass's argv/environ and wait until its log says `ready_pattern`;
        on failure nothing is left running and the temp dir is gone."""
        self._spawn(self.argv(), self.environ())
        try:
            self.wait_ready(self.host, self.port, timeout, ready_pattern=self.ready_pattern)
        except BaseException:
            self.stop()
            self.remove_tmp()
            self.done = True
            raise
        return self

    def _spawn(self, argv, env):
        logf = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                         env=env, cwd=self.tmp, start_new_session=True)
            _LIVE.add(self)
        finally:
            logf.close()

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    @property
    def origin(self):
        """http://host:port, without the base url (what a client is given as its server)."""
        return f"http://{self.host}:{self.port}"

    def connection(self):
        """The keyword arguments every call of the Python client (clients/python) takes."""
        return {"url": self.origin, "token": self.token}

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, host, port, timeout, ready_pattern=None):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"{self.name} exited with status {self.proc.returncode} before "
                                   f"it was ready; log:\n{self.log_tail()}")
            if (ready_pattern is None or re.search(ready_pattern, self.log_text())) and port_accepts(host, port):
                return
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} not ready after {timeout}s; log:\n{self.log_tail()}")

    def stop(self, timeout=20):
        """SIGTERM the server by pid, SIGKILL after `timeout`; then clean up its process group
        and anything left running in its temp dir. Returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.stopped_by_us = True
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.killed_after_timeout = True
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                self.proc.wait(timeout=10)
        self.returncode = self.proc.returncode
        # The server was started as the leader of its own process group: whatever it left in
        # that group (kernels it failed to stop) goes with it.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        # Anything else still running from this server (sandboxes in their own sessions):
        # give it a moment to go by itself, then record and kill it by pid.
        deadline = time.monotonic() + 2
        left = _pids_using(self.tmp)
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = _pids_using(self.tmp)
        self.leftover = [(pid, _cmdline(pid)) for pid in left]
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        return self.returncode

    def remove_tmp(self):
        """Remove the temp dir; first detach whatever is still mounted in it (returned, so
        that a daemon leaving mounts behind can be reported)."""
        _LIVE.discard(self)
        left = mounts_under(self.tmp)
        for point in left:
            subprocess.run(["umount", "-l", point], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(self.tmp, ignore_errors=True)
        return left


class Daemon(ServerProcess):
    """One cellboxd on 127.0.0.1:<free port> with a temp --data-dir and a random token.

    args: extra command-line arguments; env: extra environment; token=None to pass no --token
    (then the caller must give one some other way); base_url: the --base-url to pass.
    """

    name = "cellboxd"

    def __init__(self, args=(), env=None, token="", base_url=None, pass_token=True,
                 pass_port=True, port=None, equals_form=False, auto_args=True):
        super().__init__()
        self.binary = daemon_binary()
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self.token = token or secrets.token_hex(16)
        self.base_url = base_url or "/"
        self.data_dir = os.path.join(self.tmp, "data")
        os.makedirs(self.data_dir)
        self.args = list(args)
        self.extra_env = dict(env or {})
        self.pass_token = pass_token
        self.pass_port = pass_port
        self.equals_form = equals_form
        self.auto_args = auto_args

    def argv(self):
        """--ip, --data-dir, --port, --token, --base-url (unless auto_args=False), then args."""
        opts = []
        if self.auto_args:
            opts = [("ip", self.host), ("data-dir", self.data_dir)]
            if self.pass_port:
                opts.append(("port", str(self.port)))
            if self.pass_token:
                opts.append(("token", self.token))
            if self.base_url != "/":
                opts.append(("base-url", self.base_url))
        argv = [self.binary]
        for name, value in opts:
            argv += [f"--{name}={value}"] if self.equals_form else [f"--{name}", value]
        return argv + self.args

    def environ(self):
        """Nothing of the caller's: a system PATH, a HOME in the temp dir, a locale, the
        sanitizer options, then the test's own `env`."""
        return daemon_environ(self.tmp, self.extra_env)

    ready_pattern = r"cellboxd listening on"

    def start(self, timeout=30):
        if not os.access(self.binary, os.X_OK):
            raise RuntimeError(f"cellboxd binary not found at {self.binary} "
                               "(set CELLBOX_DAEMON or CELLBOX_BUILD, or run `make build`)")
        return self._start(timeout)

    def client(self):
        return Client(self.host, self.port, self.token, self.base_url)

    def workspace(self, kernel_id):
        return os.path.join(self.data_dir, "workspaces", kernel_id)

    def sanitizer_report(self):
        text = self.log_text()
        for marker in SANITIZER_MARKERS:
            i = text.find(marker)
            if i >= 0:
                return text[max(0, i - 200):i + 3000]
        return None

    def finish(self):
        """Stop, then report what went wrong on the daemon's side (crash before we stopped
        it, sanitizer findings). Returns a problem description or None; removes the temp dir."""
        if self.done:
            return None
        self.done = True
        crashed = self.proc is not None and self.proc.poll() is not None and not self.stopped_by_us
        rc_before = self.proc.returncode if crashed else None
        self.stop()
        problems = []
        if crashed:
            problems.append(f"cellboxd exited on its own during the test (status {rc_before})")
        report = self.sanitizer_report()
        if report:
            problems.append("sanitizer report in cellboxd's log:\n" + report)
        log = self.log_tail(6000)
        left = self.remove_tmp()
        if left and self.returncode is not None and self.stopped_by_us and not crashed:
            problems.append(f"cellboxd left {len(left)} mount(s) behind after it exited: {left[:5]}")
        if self.killed_after_timeout:
            problems.append("cellboxd did not exit within 20 s of SIGTERM (killed)")
        if self.leftover and self.stopped_by_us and not crashed:
            problems.append(f"cellboxd left {len(self.leftover)} process(es) running after it exited "
                            f"(killed now): {self.leftover[:5]}")
        if problems:
            return "\n".join(problems) + "\n--- cellboxd log tail ---\n" + log
        return None


class JupyterServer(ServerProcess):
    """Debian's Jupyter Server (jupyter_server 1.23) with every JUPYTER_* dir in its temp dir.

    gateway_url: when set, the server forwards kernels to that gateway (cellboxd)."""

    name = "jupyter-server"

    def __init__(self, gateway_url=None, gateway_token=None, extra_args=()):
        super().__init__()
        self.host = "127.0.0.1"
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.root_dir = os.path.join(self.tmp, "root")
        os.makedirs(self.root_dir)
        self.gateway_url = gateway_url
        self.gateway_token = gateway_token
        self.extra_args = list(extra_args)

    def environ(self):
        env = dict(os.environ)
        for key in list(env):
            if key.startswith(("JUPYTER_", "IPYTHON", "CELLBOX_")) or key in ("PYTHONPATH", "PYTHONHOME"):
                del env[key]
        home = os.path.join(self.tmp, "home")
        for sub in ("config", "data", "runtime", "ipython", "home", "tmp"):
            os.makedirs(os.path.join(self.tmp, sub), exist_ok=True)
        env.update({
            "HOME": home,
            # JUPYTER_NO_CONFIG makes jupyter_core create a temp dir of its own: keep it in ours.
            "TMPDIR": os.path.join(self.tmp, "tmp"),
            "JUPYTER_CONFIG_DIR": os.path.join(self.tmp, "config"),
            "JUPYTER_DATA_DIR": os.path.join(self.tmp, "data"),
            "JUPYTER_RUNTIME_DIR": os.path.join(self.tmp, "runtime"),
            "JUPYTER_PLATFORM_DIRS": "0",
            "JUPYTER_NO_CONFIG": "1",
            "IPYTHONDIR": os.path.join(self.tmp, "ipython"),
            "PATH": "/usr/local/bin:/usr/bin:/bin",
        })
        return env

    def argv(self):
        argv = [SYSTEM_PYTHON, "-m", "jupyter_server", "--no-browser", "--allow-root",
                f"--ServerApp.ip={self.host}", f"--ServerApp.port={self.port}",
                "--ServerApp.port_retries=0", f"--ServerApp.token={self.token}",
                "--ServerApp.password=", f"--ServerApp.root_dir={self.root_dir}",
                "--ServerApp.open_browser=False"]
        if self.gateway_url:
            argv += [f"--gateway-url={self.gateway_url}",
                     f"--GatewayClient.auth_token={self.gateway_token or ''}",
                     "--GatewayClient.request_timeout=60",
                     "--GatewayClient.connect_timeout=30"]
        return argv + self.extra_args

    ready_pattern = r"is running at"

    def start(self, timeout=60):
        return self._start(timeout)

    def client(self):
        return Client(self.host, self.port, self.token)

    def finish(self):
        if not self.done:
            self.done = True
            self.stop()
            self.remove_tmp()


def run_daemon_to_exit(args, env=None, timeout=20):
    """Run cellboxd with these arguments (nothing added) and wait for it to exit on its own.
    Returns CompletedProcess (stdout/stderr as text). For --help, --version and refusals."""
    tmp = tempfile.mkdtemp(prefix="cellbox-test-exit-")
    full_env = daemon_environ(tmp, env)
    proc = subprocess.Popen([daemon_binary()] + list(args), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env, cwd=tmp,
                            start_new_session=True, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"cellboxd {args} did not exit within {timeout}s; stderr:\n{err[-3000:]}")
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@contextlib.contextmanager
def serving_in_thread(server):
    """Run an in-process http.server (a stand-in for a service the code under test calls) in a
    thread for the block; yields its http://127.0.0.1:port; shut down and closed after."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def python_version():
    return sys.version


def finish_or_fail(server):
    """Stop the server; whatever it reports at the end (a sanitizer error, leftovers) fails the
    test that owned it."""
    import pytest
    problem = server.finish()
    if problem:
        pytest.fail(problem, pytrace=False)


def serve(server):
    """For fixtures (`yield from serve(...)`): yields a started server, then finish_or_fail."""
    yield server
    finish_or_fail(server)


def fail_if_dead(request):
    """After a test that used the `daemon` fixture: fail it if cellboxd died meanwhile."""
    import pytest
    if "daemon" in request.fixturenames:
        d = request.getfixturevalue("daemon")
        if hasattr(d, "alive") and not d.alive():
            pytest.fail(f"cellboxd died during this test; log tail:\n{d.log_tail()}", pytrace=False)
