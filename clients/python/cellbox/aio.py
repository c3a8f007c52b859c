"""cellbox.aio: the same client for asyncio. Every method of Sandbox, sandbox.files and
sandbox.commands is a coroutine here; the calls run the synchronous client in a worker thread
(asyncio.to_thread), so the event loop never blocks on the network.

    from cellbox.aio import AsyncSandbox

    async with await AsyncSandbox.create() as sb:
        execution = await sb.run_code("print('hi')", on_stdout=print)

Streaming callbacks (plain functions or coroutine functions) run on the event loop, in stream
order, while the cell runs; run_code returns after the last one. Cancelling run_code interrupts
the cell (within 5 s). A foreground command whose caller is cancelled runs to its end.
"""
import asyncio
import functools
import inspect
import threading

from ._transport import DEFAULT_REQUEST_TIMEOUT
from .sandbox import DEFAULT_TIMEOUT_S, Sandbox
from .snapshots import Snapshot
from .stateless import run as _run_sync


def _on_loop(loop, callback, cancel=None):
    """A function for the worker thread that runs `callback` on `loop` and waits for it, so
    callbacks see the loop's world and keep their order."""
    if callback is None:
        return None

    async def invoke(arg):
        value = callback(arg)
        if inspect.isawaitable(value):
            await value

    def call(arg):
        if cancel is not None and cancel.is_set():
            return
        asyncio.run_coroutine_threadsafe(invoke(arg), loop).result()

    return call


async def _thread(function, *args, **kwargs):
    return await asyncio.to_thread(functools.partial(function, *args, **kwargs))


class AsyncSandbox:
    """Sandbox for asyncio (see cellbox.Sandbox for what each method does)."""

    def __init__(self, sandbox):
        self.sync = sandbox                       # the synchronous Sandbox underneath
        self.files = AsyncFiles(sandbox.files)
        self.commands = AsyncCommands(sandbox.commands)

    def __repr__(self):
        return f"AsyncSandbox({self.id!r})"

    @property
    def id(self):
        return self.sync.id

    sandbox_id = id

    @property
    def connection(self):
        return self.sync.connection

    @classmethod
    async def create(cls, template=None, timeout_s=DEFAULT_TIMEOUT_S, env=None, metadata=None, limits=None,
                     network=None, url=None, token=None, request_timeout=DEFAULT_REQUEST_TIMEOUT,
                     auto_resume=False, volumes=None):
        return cls(await _thread(Sandbox.create, template=template, timeout_s=timeout_s, env=env,
                                 metadata=metadata, limits=limits, network=network, url=url, token=token,
                                 request_timeout=request_timeout, auto_resume=auto_resume,
                                 volumes=volumes))

    @classmethod
    async def connect(cls, sandbox_id, url=None, token=None, request_timeout=DEFAULT_REQUEST_TIMEOUT,
                      auto_resume=False):
        return cls(await _thread(Sandbox.connect, sandbox_id, url=url, token=token,
                                 request_timeout=request_timeout, auto_resume=auto_resume))

    @classmethod
    async def list(cls, state=None, metadata=None, url=None, token=None,
                   request_timeout=DEFAULT_REQUEST_TIMEOUT):
        return await _thread(Sandbox.list, state=state, metadata=metadata, url=url, token=token,
                             request_timeout=request_timeout)

    async def run_code(self, code, context=None, language=None, env_vars=None, timeout_s=None,
                       on_stdout=None, on_stderr=None, on_result=None, on_error=None):
        loop = asyncio.get_running_loop()
        cancel = threading.Event()
        call = functools.partial(
            self.sync.run_code, code, context=context, language=language, env_vars=env_vars,
            timeout_s=timeout_s, on_stdout=_on_loop(loop, on_stdout, cancel),
            on_stderr=_on_loop(loop, on_stderr, cancel), on_result=_on_loop(loop, on_result, cancel),
            on_error=_on_loop(loop, on_error, cancel), _cancel=cancel)
        try:
            return await asyncio.to_thread(call)
        except asyncio.CancelledError:
            cancel.set()  # the worker closes the stream at its next line: the cell is interrupted
            raise

    async def info(self):
        return await _thread(self.sync.info)

    async def is_running(self):
        return await _thread(self.sync.is_running)

    async def kill(self):
        return await _thread(self.sync.kill)

    async def pause(self):
        return await _thread(self.sync.pause)

    async def resume(self):
        return await _thread(self.sync.resume)

    async def set_timeout(self, timeout_s):
        return await _thread(self.sync.set_timeout, timeout_s)

    async def get_logs(self, limit=200):
        return await _thread(self.sync.get_logs, limit)

    async def snapshot(self, name=None, metadata=None):
        return await _thread(self.sync.snapshot, name=name, metadata=metadata)

    async def fork(self, count=1, timeout_s=None, metadata=None):
        forks = await _thread(self.sync.fork, count=count, timeout_s=timeout_s, metadata=metadata)
        return [AsyncSandbox(f) if isinstance(f, Sandbox) else f for f in forks]

    async def hibernate(self):
        return await _thread(self.sync.hibernate)

    async def create_context(self, cwd=None, language=None):
        return await _thread(self.sync.create_context, cwd=cwd, language=language)

    async def list_contexts(self):
        return await _thread(self.sync.list_contexts)

    async def restart_context(self, context):
        return await _thread(self.sync.restart_context, context)

    async def remove_context(self, context):
        return await _thread(self.sync.remove_context, context)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.kill()


class AsyncFiles:
    """sandbox.files for asyncio."""

    def __init__(self, files):
        self.sync = files

    async def read(self, path):
        return await _thread(self.sync.read, path)

    async def read_text(self, path, encoding="utf-8"):
        return await _thread(self.sync.read_text, path, encoding)

    async def write(self, path, data):
        return await _thread(self.sync.write, path, data)

    async def write_many(self, files):
        return await _thread(self.sync.write_many, files)

    async def exists(self, path):
        return await _thread(self.sync.exists, path)

    async def stat(self, path):
        return await _thread(self.sync.stat, path)

    async def list(self, path=".", depth=1):
        return await _thread(self.sync.list, path, depth)

    async def make_dir(self, path):
        return await _thread(self.sync.make_dir, path)

    async def move(self, source, destination):
        return await _thread(self.sync.move, source, destination)

    rename = move

    async def remove(self, path, recursive=False):
        return await _thread(self.sync.remove, path, recursive)

    async def upload_dir(self, local_dir, path):
        return await _thread(self.sync.upload_dir, local_dir, path)

    async def download_dir(self, path, local_dir):
        return await _thread(self.sync.download_dir, path, local_dir)


class AsyncCommands:
    """sandbox.commands for asyncio."""

    def __init__(self, commands):
        self.sync = commands

    async def run(self, cmd, cwd=None, env=None, timeout_s=None, stdin=None, background=False,
                  on_stdout=None, on_stderr=None):
        loop = asyncio.get_running_loop()
        result = await _thread(self.sync.run, cmd, cwd=cwd, env=env, timeout_s=timeout_s, stdin=stdin,
                               background=background, on_stdout=_on_loop(loop, on_stdout),
                               on_stderr=_on_loop(loop, on_stderr))
        return AsyncCommandHandle(result) if background else result

    async def list(self):
        return await _thread(self.sync.list)

    async def connect(self, command_id):
        return AsyncCommandHandle(await _thread(self.sync.connect, command_id))

    async def send_stdin(self, command_id, data, eof=False):
        return await _thread(self.sync.send_stdin, command_id, data, eof)

    async def kill(self, command_id):
        return await _thread(self.sync.kill, command_id)


class AsyncCommandHandle:
    """A background command for asyncio: .id, .pid, .cmd."""

    def __init__(self, handle):
        self.sync = handle
        self.id, self.pid, self.cmd = handle.id, handle.pid, handle.cmd

    def __repr__(self):
        return f"AsyncCommandHandle({self.id!r}, pid={self.pid}, cmd={self.cmd!r})"

    async def info(self):
        return await _thread(self.sync.info)

    async def output(self):
        return await _thread(self.sync.output)

    async def send_stdin(self, data, eof=False):
        return await _thread(self.sync.send_stdin, data, eof)

    async def close_stdin(self):
        return await _thread(self.sync.close_stdin)

    async def signal(self, signal="SIGTERM"):
        return await _thread(self.sync.signal, signal)

    async def kill(self):
        return await _thread(self.sync.kill)

    async def wait(self, timeout_s=None):
        return await _thread(self.sync.wait, timeout_s)

    async def remove(self):
        return await _thread(self.sync.remove)


class AsyncSnapshot:
    """cellbox.Snapshot for asyncio: restore answers an AsyncSandbox."""

    @staticmethod
    async def list(sandbox_id=None, **connection):
        return await _thread(Snapshot.list, sandbox_id=sandbox_id, **connection)

    @staticmethod
    async def get(snapshot_id, **connection):
        return await _thread(Snapshot.get, snapshot_id, **connection)

    @staticmethod
    async def restore(snapshot_id, into=None, timeout_s=None, metadata=None, env=None, **connection):
        return AsyncSandbox(await _thread(Snapshot.restore, snapshot_id, into=into,
                                          timeout_s=timeout_s, metadata=metadata, env=env,
                                          **connection))

    @staticmethod
    async def delete(snapshot_id, **connection):
        return await _thread(Snapshot.delete, snapshot_id, **connection)


async def run(code=None, language="python", **kwargs):
    """cellbox.run for asyncio: a stateless run in a fresh sandbox."""
    return await _thread(_run_sync, code, language, **kwargs)
