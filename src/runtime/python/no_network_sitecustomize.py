"""sitecustomize of every sandbox: in a sandbox without a network, pip says why it cannot install.

cellbox binds this file over Debian's /etc/python3.11/sitecustomize.py in every sandbox
(src/sandbox/rootfs.c), so every python3 there starts with it: `pip` and `python3 -m pip` from a
command (E2B's commands.run, /v1's commands), `!pip` and IPython's %pip in a cell (both start
`python3 -m pip` or the pip script) alike. The root is the same with network or without (a
warm-pool kernel is built before anyone knows whether it will get one), so a pip process looks
when it starts: a sandbox with an interface besides loopback has a network, and there this file
does nothing more; when its denyOut refuses an index, pip's own error stands, and no note claims
that it has no network. Without one, pip gives up at once (no retries, no version check), and
left alone it would answer an index it cannot reach with "No matching distribution found", which
reads as a misspelt name: here, when pip tried to reach another host and could not, its last
line says that the sandbox has no network and what to do instead.

Any other program only pays for one look at its command line. Nothing here changes what pip
does or its exit status; it only watches name lookups and connections fail.
"""
import sys

# What Debian's sitecustomize does (apport is not in a sandbox's /usr, usually).
try:
    import apport_python_hook
except ImportError:
    pass
else:
    apport_python_hook.install()

_PIP_PROGRAMS = ("pip", "pip3", f"pip3.{sys.version_info[1]}")

NO_NETWORK_NOTE = (
    "cellbox: this sandbox has no network, so pip could not reach {hosts}. "
    "Packages already installed import as they are (pip list). To add one, download its wheel "
    "where there is a network (pip download NAME), "
    "upload it into the sandbox (E2B: files.write; /v1: PUT /v1/sandboxes/ID/files?path=FILE.whl) and run "
    "pip install --no-index ./FILE.whl; or create the sandbox with a network: "
    "/v1: POST /v1/sandboxes {{\"network\": true}}; E2B: Sandbox.create({{allowInternetAccess: true}}); "
    "Kernel Gateway: env KERNEL_CELLBOX_NETWORK=1; MCP: create_sandbox {{\"network\": true}}; "
    "CLI: cellbox create --network. cellboxd must run with --allow-network.")


def _is_pip(argv):
    """True for `python3 [options] -m pip ...` and for the pip scripts, which the kernel runs as
    `python3 /usr/bin/pip ...` (their #! line)."""
    for i, arg in enumerate(argv[1:], 1):
        if arg == "-m":
            return i + 1 < len(argv) and argv[i + 1] == "pip"
        if arg == "-mpip":
            return True
        if arg == "-c":
            return False
        if not arg.startswith("-"):  # the script
            return arg.rsplit("/", 1)[-1] in _PIP_PROGRAMS
    return False


def _watch_unreachable_hosts():
    """Records the hosts pip fails to look up or to reach for want of a route, and prints the
    note at exit if there were any. Refused connections (a local server that is down) are
    not the network's fault and are not counted."""
    import atexit
    import errno
    import socket

    unreachable = []  # host names or addresses, in the order pip tried them
    no_route = {errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EADDRNOTAVAIL}
    look_up, connect = socket.getaddrinfo, socket.socket.connect

    def remember(host):
        host = str(host)
        if host not in unreachable:
            unreachable.append(host)

    def watched_getaddrinfo(host, *args, **kwargs):
        try:
            return look_up(host, *args, **kwargs)
        except socket.gaierror:
            remember(host)
            raise

    def watched_connect(self, address):
        try:
            return connect(self, address)
        except OSError as error:
            if error.errno in no_route and isinstance(address, tuple):
                remember(address[0])
            raise

    def note():
        if unreachable:
            hosts = ", ".join(unreachable[:3]) + (" and others" if len(unreachable) > 3 else "")
            sys.stderr.flush()
            print(NO_NETWORK_NOTE.format(hosts=hosts), file=sys.stderr, flush=True)

    socket.getaddrinfo = watched_getaddrinfo
    socket.socket.connect = watched_connect
    atexit.register(note)


def _has_network():
    """True when the sandbox has an interface besides loopback: network.c gives a networked
    sandbox its interface before any request reaches it, so it is there when pip starts."""
    import socket
    try:
        return any(name != "lo" for _, name in socket.if_nameindex())
    except OSError:
        return True  # cannot tell: claim nothing


def _give_up_at_once():
    """Every index is out of reach: no retries (pip would back off for seconds), a short timeout,
    no check for a newer pip. Variables the user set stand."""
    import os
    os.environ.setdefault("PIP_RETRIES", "0")
    os.environ.setdefault("PIP_TIMEOUT", "5")
    os.environ.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")


if _is_pip(getattr(sys, "orig_argv", sys.argv)) and not _has_network():
    _give_up_at_once()
    _watch_unreachable_hosts()
