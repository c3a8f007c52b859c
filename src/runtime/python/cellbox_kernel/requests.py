"""One handler per request type; the reply contents are ipykernel 6.17's (ipkernel.py,
kernelbase.py), field for field. The kernel wraps each handler in status busy/idle."""
import sys

from IPython.core import release
from IPython.core.completer import provisionalcompleter, rectify_completions
from IPython.core.interactiveshell import ExecutionInfo, ExecutionResult
from IPython.utils.tokenutil import token_at_cursor

from .session import PROTOCOL_VERSION
from .stdin import InputForwarder

LANGUAGE_INFO = {
    "name": "python",
    "version": sys.version.split()[0],
    "mimetype": "text/x-python",
    "codemirror_mode": {"name": "ipython", "version": sys.version_info[0]},
    "pygments_lexer": "ipython3",
    "nbconvert_exporter": "python",
    "file_extension": ".py",
}

HELP_LINKS = [
    {"text": "Python Reference",
     "url": "https://docs.python.org/%i.%i" % sys.version_info[:2]},
    {"text": "IPython Reference", "url": "https://ipython.org/documentation.html"},
    {"text": "NumPy Reference", "url": "https://docs.scipy.org/doc/numpy/reference/"},
    {"text": "SciPy Reference", "url": "https://docs.scipy.org/doc/scipy/reference/"},
    {"text": "Matplotlib Reference", "url": "https://matplotlib.org/contents.html"},
    {"text": "SymPy Reference", "url": "http://docs.sympy.org/latest/index.html"},
    {"text": "pandas Reference", "url": "https://pandas.pydata.org/pandas-docs/stable/"},
]


class BadRequest(ValueError):
    """A request whose content lacks what its handler needs (ipykernel logs and skips it)."""


def _field(content, name, kind, default=None, required=False):
    value = content.get(name, default)
    if required and name not in content:
        raise BadRequest(f"missing '{name}'")
    if value is not None and not isinstance(value, kind):
        raise BadRequest(f"'{name}' has the wrong type")
    return value


class Requests:
    def __init__(self, kernel):
        self.kernel = kernel
        self.shell = kernel.shell
        self.stdin = InputForwarder(kernel)
        self._handlers = {
            "execute_request": self.execute,
            "complete_request": self.complete,
            "inspect_request": self.inspect,
            "is_complete_request": self.is_complete,
            "history_request": self.history,
            "kernel_info_request": self.kernel_info,
            "comm_info_request": self.comm_info,
            "comm_open": self.comm_open,
            "connect_request": self.connect,
            "interrupt_request": self.interrupt,
            "shutdown_request": self.shutdown,
        }

    def handler(self, msg_type):
        return self._handlers.get(msg_type)

    # ------------------------------------------------------------------ execute

    def execute(self, request):
        content = request["content"]
        code = _field(content, "code", str, required=True)
        silent = bool(content.get("silent", False))
        store_history = bool(content.get("store_history", not silent))
        user_expressions = _field(content, "user_expressions", dict) or {}
        allow_stdin = bool(content.get("allow_stdin", False))
        stop_on_error = bool(content.get("stop_on_error", True))
        cell_id = request["metadata"].get("cellId")
        metadata = self.kernel.reply_metadata()

        if not silent:
            self.kernel.publish("execute_input", {"code": code,
                                                  "execution_count": self.shell.execution_count})
        self.kernel.release()  # before user code runs: busy and execute_input leave now
        with self.stdin.forwarding(allow_stdin):
            result = self._run_cell(code, store_history, silent, cell_id)
        reply = self._execute_reply_content(result, user_expressions)

        # The reply waits for the idle status that follows it (Kernel._handle): one write.
        self.kernel.hold()
        metadata["status"] = reply["status"]
        if reply["status"] == "error" and reply["ename"] == "UnmetDependency":
            metadata["dependencies_met"] = False
        self.kernel.reply("execute_reply", reply, metadata)

        if not silent and reply["status"] == "error" and stop_on_error:
            self.kernel.abort_waiting_executes()
        if self.shell.exit_now:  # exit() / quit() in the cell: ipykernel stops its loop too
            self.kernel.exit_requested = True

    def _run_cell(self, code, store_history, silent, cell_id):
        try:
            with self.kernel.gate.armed():
                return self.shell.run_cell(code, store_history=store_history, silent=silent,
                                           cell_id=cell_id)
        except KeyboardInterrupt as error:
            # run_cell reports interrupts of user code itself; this is one that landed in
            # IPython's own bookkeeping around it. Report it the same way.
            result = ExecutionResult(ExecutionInfo(code, store_history, silent, True, cell_id))
            result.error_in_exec = error
            self.shell.showtraceback()
            return result

    def _execute_reply_content(self, result, user_expressions):
        shell = self.shell
        reply = {}
        if result.success:
            reply["status"] = "ok"
        else:
            error = (result.error_before_exec if result.error_before_exec is not None
                     else result.error_in_exec)
            reply["status"] = "error"
            reply["traceback"] = shell._last_traceback or []
            reply["ename"] = str(type(error).__name__)
            reply["evalue"] = str(error)
            reply["engine_info"] = {"engine_uuid": self.kernel.ident, "engine_id": -1,
                                    "method": "execute"}
        reply["execution_count"] = shell.execution_count - 1
        if reply["status"] == "ok":
            with self.kernel.gate.armed():  # user expressions are user code too
                reply["user_expressions"] = shell.user_expressions(user_expressions)
        else:
            reply["user_expressions"] = {}
        reply["payload"] = shell.payload_manager.read_payload()
        shell.payload_manager.clear_payload()
        return reply

    # ------------------------------------------------------------------ introspection

    def complete(self, request):
        content = request["content"]
        code = _field(content, "code", str, required=True)
        cursor_pos = _field(content, "cursor_pos", int)
        if cursor_pos is None:
            cursor_pos = len(code)
        with provisionalcompleter():
            completions = list(rectify_completions(
                code, self.shell.Completer.completions(code, cursor_pos)))
        types = [{"start": c.start, "end": c.end, "text": c.text, "type": c.type,
                  "signature": c.signature} for c in completions]
        start, end = ((completions[0].start, completions[0].end) if completions
                      else (cursor_pos, cursor_pos))
        self.kernel.reply("complete_reply", {
            "matches": [c.text for c in completions],
            "cursor_end": end,
            "cursor_start": start,
            "metadata": {"_jupyter_types_experimental": types},
            "status": "ok",
        })

    def inspect(self, request):
        content = request["content"]
        code = _field(content, "code", str, required=True)
        cursor_pos = _field(content, "cursor_pos", int, required=True)
        detail_level = _field(content, "detail_level", int, default=0)
        omit_sections = set(_field(content, "omit_sections", list, default=[]))
        reply = {"status": "ok", "data": {}, "metadata": {}}
        try:
            bundle = self.shell.object_inspect_mime(token_at_cursor(code, cursor_pos),
                                                    detail_level=detail_level,
                                                    omit_sections=omit_sections)
            reply["data"].update(bundle)
            if not self.shell.enable_html_pager:
                reply["data"].pop("text/html")
            reply["found"] = True
        except KeyError:
            reply["found"] = False
        self.kernel.reply("inspect_reply", reply)

    def is_complete(self, request):
        code = _field(request["content"], "code", str, required=True)
        status, indent_spaces = self.shell.input_transformer_manager.check_complete(code)
        reply = {"status": status}
        if status == "incomplete":
            reply["indent"] = " " * indent_spaces
        self.kernel.reply("is_complete_reply", reply)

    def history(self, request):
        # IPython's history database is off (it saves from a thread), so there is none to give.
        self.kernel.reply("history_reply", {"status": "ok", "history": []})

    # ------------------------------------------------------------------ kernel

    def kernel_info(self, request):
        self.kernel.reply("kernel_info_reply", {
            "status": "ok",
            "protocol_version": PROTOCOL_VERSION,
            "implementation": "ipython",
            "implementation_version": release.version,
            "language_info": LANGUAGE_INFO,
            "banner": self.shell.banner,
            "help_links": HELP_LINKS,
        })

    def comm_info(self, request):
        # No comm targets are registered (no ipywidgets comm manager), so no comms are open.
        self.kernel.reply("comm_info_reply", {"comms": {}, "status": "ok"})

    def comm_open(self, request):
        # ipykernel closes a comm whose target is not registered; none are.
        comm_id = _field(request["content"], "comm_id", str, required=True)
        self.kernel.publish("comm_close", {"data": {}, "comm_id": comm_id})

    def connect(self, request):
        # There are no ZMQ ports to report: the daemon is the only way in.
        self.kernel.reply("connect_reply", {"status": "ok"})

    def interrupt(self, request):
        # Requests are handled one at a time, so this one only runs when no cell does: the
        # daemon interrupts a running cell with SIGINT. Nothing is left to stop here.
        self.kernel.reply("interrupt_reply", {"status": "ok"})

    def shutdown(self, request):
        restart = bool(request["content"].get("restart", False))
        reply = {"status": "ok", "restart": restart}
        self.kernel.reply("shutdown_reply", reply)
        # ipykernel broadcasts the same content on iopub before it exits.
        self.kernel.publish("shutdown_reply", reply)
        self.shell.exit_now = True
        self.kernel.exit_requested = True
