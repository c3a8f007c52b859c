"""The request loop: one request at a time, each inside iopub status busy/idle.

Mirrors ipykernel 6.17's kernelbase.py (dispatch_shell, process_control, _abort_queues,
_input_request) on a single thread: requests read ahead of time (while waiting for an
input_reply, or when collecting the requests an error aborts) wait in `pending`, in order.
"""
import collections
import os
import traceback
import uuid

from . import checkpoint, namespace, stdio, user_site
from .channel import MAX_FRAME, ChannelClosed
from .requests import Requests
from .session import MalformedMessage, Session, decode, encode, timestamp
from .shell import add_working_directory_to_path, create_shell, enable_inline_figures

_CURRENT_REQUEST = object()  # send()'s default parent: the request being handled


class Kernel:
    def __init__(self, channel, gate):
        self.channel = channel
        channel.on_switch = self._announce_after_switch
        self.gate = gate
        self.session = Session()
        self.ident = str(uuid.uuid4())      # ipykernel's engine id (execute_reply metadata)
        self.pending = collections.deque()  # requests read but not handled yet, in order
        self._abort_window = 0              # leading entries of `pending` an error aborts
        self.request = None                 # the request being handled: parent of what we send
        self._in_request = False            # between its busy and its idle
        self._held = None                   # encoded messages held back (hold()), else None
        self.exit_requested = False
        self.shell = None
        self.requests = None

    def start(self):
        """Build the shell, then announce that requests can come."""
        self.shell = create_shell(self)
        add_working_directory_to_path()
        user_site.enable()
        self.requests = Requests(self)
        enable_inline_figures(self.shell)
        self._warm_up()
        self.send("iopub", "status", {"execution_state": "starting"}, parent=None)

    def _warm_up(self):
        """Run an empty cell before announcing ourselves: a kernel forked from the zygote copies
        the pages its first cell touches (refcounts are writes), and IPython builds caches on
        first use. Paid here — in the warm pool, ahead of time — not in the user's first cell."""
        self.shell.run_cell("None", store_history=False, silent=True)
        # A silent cell skips the display hook: format a value as an execute_result would.
        self.shell.display_formatter.format(0)

    def serve(self):
        """Handle requests until shutdown; returns the exit status."""
        while not self.exit_requested:
            request, aborting = self._next_request()
            self._handle(request, aborting)
        return 0

    # ------------------------------------------------------------------ sending

    def send(self, channel, msg_type, content, metadata=None, parent=_CURRENT_REQUEST):
        """One message to the daemon; its parent is the request being handled unless given."""
        parent = self.request if parent is _CURRENT_REQUEST else parent
        # Output written before this message must reach the daemon first (held messages:
        # hold() flushed, and nothing but our own code runs between them).
        if self._held is None:
            stdio.flush()
        message = self.session.message(channel, msg_type, content, parent, metadata)
        body = encode(message)
        if len(body) > MAX_FRAME:
            body = self._replace_oversized(message, len(body))
            if body is None:
                return
        if self._held is not None:
            self._held.append(body)
        else:
            self.channel.send(body)

    def _announce_after_switch(self):
        """A new daemon took us over (channel.py): the first thing it reads from us says whether
        a request is running, and which (docs/kernel-protocol.md, "Adoption")."""
        busy = self._in_request
        message = self.session.message("iopub", "status",
                                       {"execution_state": "busy" if busy else "idle"},
                                       self.request if busy else None, None)
        self.channel.send(encode(message))

    def hold(self):
        """Messages sent from now on wait for release(), to leave in one write. Only around
        code that neither blocks nor runs user code: a held message is a late one."""
        if self._held is None:
            stdio.flush()
            self._held = []

    def release(self):
        held, self._held = self._held, None
        if held:
            self.channel.send_all(held)

    def publish(self, msg_type, content, metadata=None):
        self.send("iopub", msg_type, content, metadata)

    def reply(self, msg_type, content, metadata=None):
        self.send(self.request["channel"], msg_type, content, metadata)

    def _replace_oversized(self, message, size):
        """A message over the frame limit would make the daemon kill us: an iopub message is
        dropped, a reply is replaced by an error reply. Either way the user is told on stderr."""
        msg_type = message["header"]["msg_type"]
        stdio.log(f"{msg_type} message of {size} bytes exceeds the channel limit of "
                  f"{MAX_FRAME} bytes; " + ("not sent" if message["channel"] == "iopub"
                                           else "sending an error reply instead"))
        if message["channel"] == "iopub":
            return None
        message["content"] = {"status": "error", "ename": "MessageTooLarge",
                              "evalue": f"{msg_type} of {size} bytes exceeds {MAX_FRAME} bytes",
                              "traceback": []}
        return encode(message)

    # ------------------------------------------------------------------ receiving

    def _next_request(self):
        """The next message to handle and whether an earlier error aborts it."""
        while True:
            if self.pending:
                message = self.pending.popleft()
                aborting = self._abort_window > 0
                self._abort_window = max(0, self._abort_window - 1)
                return message, aborting
            message = self._receive()
            if message is not None:
                return message, False

    def _receive(self):
        """The next message from the channel (waiting for it), or None for a malformed frame."""
        return self._decode(self.channel.receive())

    def _collect_waiting(self, drop_stdin):
        """Move every message already waiting on the channel to `pending`, without blocking."""
        for body in self.channel.receive_ready():
            message = self._decode(body)
            if message is not None and not (drop_stdin and message["channel"] == "stdin"):
                self.pending.append(message)

    @staticmethod
    def _decode(body):
        try:
            return decode(body)
        except MalformedMessage as error:
            stdio.log(f"ignoring a malformed frame from the daemon: {error}")
            return None

    # ------------------------------------------------------------------ handling

    def _handle(self, message, aborting):
        channel = message["channel"]
        if channel == "cellbox":
            namespace.handle(self, message)  # save_namespace, load_namespace (namespace.py)
            self._handle_internal(message)  # unknown types are ignored
            return
        if channel not in ("shell", "control"):
            return  # a stale input_reply: ipykernel discards those too
        self.request = message
        self._in_request = True
        self.gate.install()
        msg_type = message["header"]["msg_type"]
        if msg_type == "execute_request":
            self.hold()  # busy leaves with execute_input (Requests.execute releases both)
        try:
            self.send("iopub", "status", {"execution_state": "busy"})
            if aborting and channel == "shell" and msg_type == "execute_request":
                self._reply_aborted()
            else:
                saved = self._apply_request_environment(message)
                try:
                    self._run_handler(msg_type, message)
                finally:
                    self._restore_environment(saved)
            self.send("iopub", "status", {"execution_state": "idle"})
        finally:
            self.release()  # the reply and idle (held by Requests.execute) leave together
            self._in_request = False

    @staticmethod
    def _apply_request_environment(message):
        """cellbox's /v1 execute may carry variables for this one execution, in the request's
        metadata as {"cellbox": {"env": {...}}}; returns what to put back afterwards."""
        extension = message.get("metadata", {}).get("cellbox")
        env = extension.get("env") if isinstance(extension, dict) else None
        if not isinstance(env, dict):
            return None
        saved = {}
        for name, value in env.items():
            if isinstance(name, str) and isinstance(value, str) and name and "=" not in name:
                saved[name] = os.environ.get(name)
                os.environ[name] = value
        return saved

    @staticmethod
    def _restore_environment(saved):
        for name, value in (saved or {}).items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    def _handle_internal(self, message):
        """Commands from the daemon itself, by "type" (unknown types are ignored)."""
        kind = message.get("type")
        if kind == "environment":
            self._apply_environment(message)
        elif kind == "checkpoint":
            checkpoint.take(self)

    @staticmethod
    def _apply_environment(message):
        """A kernel handed out from the warm pool gets the variables its request asked for
        (KERNEL_*), as if it had started with them, and a "cwd" to work in (E2B's contexts start
        in the user's home)."""
        if isinstance(message.get("set"), dict):
            for name, value in message["set"].items():
                if isinstance(name, str) and isinstance(value, str) and "=" not in name:
                    os.environ[name] = value
            if isinstance(message.get("cwd"), str):
                try:
                    os.chdir(message["cwd"])
                except OSError as error:
                    stdio.log(f"cannot change to {message['cwd']}: {error}")

    def _run_handler(self, msg_type, message):
        handler = self.requests.handler(msg_type)
        if handler is None:
            return  # ipykernel logs unknown types and sends nothing but busy/idle
        try:
            handler(message)
        except ChannelClosed:
            raise
        except (Exception, KeyboardInterrupt) as error:
            where = traceback.extract_tb(error.__traceback__)[-1]
            stdio.log(f"{msg_type} failed: {type(error).__name__}: {error} "
                      f"({where.filename}:{where.lineno})")

    def _reply_aborted(self):
        msg_type = self.request["header"]["msg_type"]
        metadata = self.reply_metadata()
        metadata["status"] = "aborted"
        self.reply(msg_type.rsplit("_", 1)[0] + "_reply", {"status": "aborted"}, metadata)

    def reply_metadata(self):
        """ipykernel's execute_reply metadata (kept for ipyparallel compatibility)."""
        return {"started": timestamp(), "dependencies_met": True, "engine": self.ident}

    def abort_waiting_executes(self):
        """After an error with stop_on_error: every execute_request already waiting gets an
        `aborted` reply (ipykernel._abort_queues with its default stop_on_error_timeout=0)."""
        self._collect_waiting(drop_stdin=False)
        self._abort_window = len(self.pending)

    # ------------------------------------------------------------------ stdin

    def request_input(self, prompt, password):
        """input()/getpass() for user code: input_request on stdin, then the input_reply."""
        try:
            self._collect_waiting(drop_stdin=True)  # purge stale replies, as ipykernel does
            self.send("stdin", "input_request", {"prompt": prompt, "password": password})
            message = self._wait_input_reply()
        except KeyboardInterrupt:
            raise KeyboardInterrupt("Interrupted by user") from None
        value = message["content"].get("value", "")
        if not isinstance(value, str):
            stdio.log("input_reply without a string 'value'; using ''")
            value = ""
        if value == "\x04":  # what frontends send for EOF (Ctrl-D)
            raise EOFError
        return value

    def _wait_input_reply(self):
        """Read until an input_reply; requests arriving meanwhile are kept, in order."""
        while True:
            message = self._receive()
            if message is None:
                continue
            if message["channel"] != "stdin":
                self.pending.append(message)
            elif message["header"]["msg_type"] == "input_reply":
                return message
