"""cellbox: the Python client of cellboxd's native API (/v1), standard library only.

    from cellbox import Sandbox

    with Sandbox.create() as sb:
        sb.run_code("import pandas as pd; df = pd.DataFrame({'x': [1, 2, 3]})")
        execution = sb.run_code("df.x.sum()", on_stdout=print)
        print(execution.text)                     # "6"
        sb.files.write("data.csv", "a,b\\n1,2\\n")
        print(sb.commands.run("wc -l data.csv").stdout)

    import cellbox
    print(cellbox.run("print(6 * 7)").output)     # a stateless run in a fresh sandbox

cellbox.aio.AsyncSandbox is the same API for asyncio; cellbox.adapters holds ready-made tools
for AutoGen, LangChain and OpenAI function calling. The daemon's address and token come from
url=/token=, else $CELLBOX_URL/$CELLBOX_TOKEN, else http://127.0.0.1:8888 and .cellbox/token.
"""
from .commands import CommandHandle, Commands
from .errors import (AuthenticationError, BadRequestError, CellboxError, ConflictError, ConnectionError,
                     ForbiddenError, InsufficientStorageError, NotFoundError, PayloadTooLargeError,
                     SandboxDeadError, SandboxPausedError, ServerError, TimeoutError)
from .files import Files
from .models import (Accounting, CommandInfo, CommandResult, Context, EntryInfo, Execution, ExecutionError,
                     Logs, OutputMessage, Result, RunResult, SandboxInfo, SnapshotInfo, strip_ansi)
from .sandbox import Sandbox
from .snapshots import Snapshot
from .stateless import run
from .volumes import Volume

__version__ = "0.1.0"

__all__ = [
    "Sandbox", "Files", "Commands", "CommandHandle", "run", "Volume", "Snapshot",
    "SnapshotInfo", "Execution", "Result", "Logs", "ExecutionError", "Accounting", "OutputMessage", "Context",
    "SandboxInfo", "EntryInfo", "CommandResult", "CommandInfo", "RunResult", "strip_ansi",
    "CellboxError", "BadRequestError", "AuthenticationError", "ForbiddenError", "NotFoundError",
    "ConflictError", "SandboxPausedError", "SandboxDeadError", "PayloadTooLargeError",
    "InsufficientStorageError", "ServerError", "ConnectionError", "TimeoutError",
]
