"""The exceptions the client raises.

Every error cellboxd answers carries its HTTP status and the daemon's message (which names the
field, the state or the limit, and what to do); the class says which kind it is:

    CellboxError                  the base: .status (None for client-side errors), .message, .reason
      BadRequestError             400  a wrong argument (the message names it)
      AuthenticationError         401  missing or wrong token
      ForbiddenError              403  a limit of the daemon (--max-kernels, network, /proc paths)
      NotFoundError               404  no such sandbox, context, command or file
      ConflictError               409  the state does not allow it
        SandboxPausedError        409  the sandbox is paused: resume() it or use auto_resume=True
        SandboxDeadError          409  the sandbox died (the message says why)
      PayloadTooLargeError        413  a body or file over a limit
      InsufficientStorageError    507  the sandbox's disk is full
      ServerError                 5xx  anything else from the daemon
      ConnectionError             the daemon cannot be reached (also a builtins.ConnectionError)
      TimeoutError                no answer in time (also a builtins.TimeoutError)

A cell that raises is not an exception here: it comes back as `Execution.error`.
"""
import builtins
import json


class CellboxError(Exception):
    """An error from cellboxd or from talking to it."""

    def __init__(self, message, status=None, reason=None, method=None, url=None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason
        self.method = method
        self.url = url

    def __str__(self):
        if self.status is None:
            return self.message
        return f"{self.status} {self.reason or ''}: {self.message}".replace(" :", ":")


class BadRequestError(CellboxError):
    """400: an argument the daemon refused; the message names it."""


class AuthenticationError(CellboxError):
    """401: the token is missing or wrong (pass token=, set CELLBOX_TOKEN, or keep it in
    .cellbox/token as `make run` does)."""


class ForbiddenError(CellboxError):
    """403: the daemon does not allow this (a kernel limit, network access, a refused path)."""


class NotFoundError(CellboxError):
    """404: no such sandbox, context, command or file."""


class ConflictError(CellboxError):
    """409: the current state does not allow this."""


class SandboxPausedError(ConflictError):
    """409: the sandbox is paused. Call resume(), or connect with auto_resume=True."""


class SandboxDeadError(ConflictError):
    """409: the sandbox is dead; the message says why. Create a new one."""


class PayloadTooLargeError(CellboxError):
    """413: a request body or a file over the daemon's or the sandbox's limit."""


class InsufficientStorageError(CellboxError):
    """507: the sandbox's disk is full."""


class ServerError(CellboxError):
    """A 5xx answer not covered above."""


class ConnectionError(CellboxError, builtins.ConnectionError):  # noqa: A001 - mirrors the builtin
    """The daemon could not be reached, or the connection broke mid-answer."""


class TimeoutError(CellboxError, builtins.TimeoutError):  # noqa: A001 - mirrors the builtin
    """The daemon did not answer in time (a client-side timeout). A cell that runs past its own
    timeout_s is reported in Execution.error instead, with name "TimeoutError"."""


_BY_STATUS = {
    400: BadRequestError,
    401: AuthenticationError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    507: InsufficientStorageError,
}


def error_from_response(status, body, method=None, url=None, reason=None):
    """The exception for an error answer: `body` is the raw bytes of the daemon's
    {"reason", "message"} JSON (anything else is shown as it is)."""
    message = None
    try:
        parsed = json.loads(body.decode("utf-8", "replace")) if body else None
        if isinstance(parsed, dict):
            message = parsed.get("message")
            reason = parsed.get("reason") or reason
    except ValueError:
        pass
    if not message:
        text = body.decode("utf-8", "replace").strip() if body else ""
        message = text[:500] or f"{method or ''} {url or ''} answered {status}".strip()
    cls = _BY_STATUS.get(status)
    if cls is None:
        cls = ServerError if status >= 500 else CellboxError
    if cls is ConflictError:
        if " is paused" in message:
            cls = SandboxPausedError
        elif " is dead" in message:
            cls = SandboxDeadError
    return cls(message, status=status, reason=reason, method=method, url=url)
