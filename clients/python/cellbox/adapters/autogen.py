"""A code executor with AutoGen's shape, backed by a cellbox sandbox. Python blocks run in one
persistent kernel (variables survive from one call to the next, like DockerJupyterCodeExecutor);
bash/sh blocks run as shell commands in the same sandbox (same files). The first failing block
stops the batch.

    from cellbox.adapters.autogen import CellboxCodeExecutor, CodeBlock

    with CellboxCodeExecutor(output_dir="out", functions=[load_data]) as executor:
        executor.execute_code_blocks([CodeBlock(code="x = 1 + 2", language="python")])
        result = executor.execute_code_blocks([{"code": "print(x)", "language": "python"}])
        result.exit_code, result.output        # 0, "3"

AsyncCellboxCodeExecutor has the coroutine interface of autogen-core's CodeExecutor
(execute_code_blocks(code_blocks, cancellation_token), start, stop, restart, `async with`), so
AutoGen's CodeExecutorAgent can use it as its code_executor.

AutoGen is not needed. When autogen_core is importable, the result is a subclass of its
CodeResult, AsyncCellboxCodeExecutor is its CodeExecutor and Component (dump_component,
load_component), and its CancellationToken interrupts the running cell; without it the same
fields and methods come from this package.
"""
import asyncio
import posixpath
import re
import shlex
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

from .. import errors
from ..sandbox import Sandbox
from . import _autogen_functions
from ._autogen_component import PROVIDER, CellboxCodeExecutorConfig, ComponentModel, _Component

try:
    from autogen_core import Component as _AutoGenComponent
    from autogen_core.code_executor import CodeExecutor as _AutoGenCodeExecutor
    from autogen_core.code_executor import CodeResult as _AutoGenCodeResult
except ImportError:
    _AutoGenComponent = _AutoGenCodeExecutor = _AutoGenCodeResult = None

AUTOGEN_INSTALLED = _AutoGenCodeResult is not None
PYTHON = ("python", "python3", "py", "")
SHELL = ("bash", "shell", "sh")
TIMEOUT_EXIT_CODE = 124   # AutoGen's command-line executors use it for a timeout
FUNCTION_PROMPT_TEMPLATE = _autogen_functions.FUNCTION_PROMPT_TEMPLATE

_CODE_BLOCK = re.compile(r"```[ \t]*([\w+\-]*)[^\n]*\n(.*?)```", re.DOTALL)
_FILENAME = "# filename:"

__all__ = ["AUTOGEN_INSTALLED", "AsyncCellboxCodeExecutor", "CellboxCodeExecutor", "CellboxCodeExecutorConfig",
           "CellboxCodeResult", "CodeBlock", "ComponentModel", "FUNCTION_PROMPT_TEMPLATE", "extract_code_blocks"]


@dataclass
class CodeBlock:
    """A block of code as AutoGen's CodeBlock (any object with .code and .language works,
    AutoGen's own included, and so does a dict)."""

    code: str
    language: str = "python"


@dataclass
class CellboxCodeResult(*((_AutoGenCodeResult,) if AUTOGEN_INSTALLED else ())):
    """AutoGen's CodeResult (exit_code, output), its JupyterCodeResult's output_files (images
    and HTML saved in output_dir) and its CommandLineCodeResult's code_file (the first block
    saved by a `# filename:` line). A subclass of autogen_core's CodeResult when installed."""

    exit_code: int
    output: str
    output_files: List[Path] = field(default_factory=list)
    code_file: Optional[str] = None


def extract_code_blocks(markdown):
    """The fenced code blocks of a model's message, as CodeBlocks (no language = python)."""
    return [CodeBlock(code=code, language=(lang or "python").lower()) for lang, code in _CODE_BLOCK.findall(markdown)]


def _block(block):
    if isinstance(block, dict):
        return block["code"], (block.get("language") or "python").lower()
    return block.code, (getattr(block, "language", None) or "python").lower()


class _Cancellation:
    """One batch's link to a CancellationToken (autogen_core's, or anything with add_callback):
    cancelling sets `event`, which run_code looks at on every line of the cell's stream (the
    daemon sends a keepalive every 5 s), and kills the shell command that runs."""

    def __init__(self, token):
        self.event = threading.Event()
        self._lock = threading.Lock()
        self._command = None
        if token is not None and hasattr(token, "add_callback"):
            token.add_callback(self.cancel)

    def cancel(self):
        self.event.set()
        with self._lock:
            command = self._command
        if command is not None:
            try:
                command.kill()
            except errors.CellboxError:
                pass  # it ended on its own meanwhile

    def running(self, command):
        with self._lock:
            self._command = command
        if command is not None and self.event.is_set():
            self.cancel()

    def raise_if_cancelled(self):
        if self.event.is_set():
            raise asyncio.CancelledError("the code execution was cancelled: the running block was interrupted")


class CellboxCodeExecutor(_Component):
    """Runs code blocks in a cellbox sandbox.

    sandbox: an existing Sandbox to use (left alone at the end); without it one is created at
    first use (Sandbox.create(**sandbox_options): url, token, timeout_s (default 3600),
    limits, ...) and killed by stop() / the end of the `with` block. context: a context of the
    sandbox to run python in (default: its default context). timeout: seconds per block.
    output_dir: where images and HTML are saved on this machine (created; default a new temp
    dir). work_dir: the directory inside the sandbox where code runs, `# filename:` blocks and
    the functions module are saved (created; default the context's working directory,
    /workspace). functions: callables, FunctionWithRequirements(Str) or source strings, written
    into work_dir as `functions_module`.py before the first block, so that the code can
    `from functions import ...` (their python_packages are pip-installed first)."""

    supported_languages = list(PYTHON[:-1] + SHELL)
    component_provider_override = "cellbox.adapters.autogen.CellboxCodeExecutor"

    def __init__(self, sandbox=None, *, timeout=60, output_dir=None, context=None, work_dir=None,
                 functions=(), functions_module="functions", **sandbox_options):
        if timeout < 1:
            raise ValueError("timeout must be at least 1 second")
        if not functions_module.isidentifier():
            raise ValueError(f"functions_module {functions_module!r} is not a Python identifier")
        self._sandbox = sandbox
        self._owns_sandbox = sandbox is None
        self._sandbox_options = {"timeout_s": 3600, **sandbox_options}
        self._context = context
        self.timeout = timeout
        self._owns_output_dir = not output_dir
        self.output_dir = Path(output_dir) if output_dir else Path(tempfile.mkdtemp(prefix="cellbox-autogen-"))
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self._work_dir_asked = str(work_dir) if work_dir is not None else None
        self._work_dir = None          # the absolute path in the sandbox, once the kernel is set up
        self._functions = list(functions)
        self._functions_module = functions_module

    @property
    def sandbox(self):
        """The sandbox the code runs in (created on first use)."""
        if self._sandbox is None:
            self._sandbox = Sandbox.create(**self._sandbox_options)
        return self._sandbox

    @property
    def work_dir(self):
        """The working directory inside the sandbox (an absolute path)."""
        return self._prepare()

    @property
    def functions(self):
        return list(self._functions)

    @property
    def functions_module(self):
        return self._functions_module

    def format_functions_for_prompt(self, prompt_template=FUNCTION_PROMPT_TEMPLATE):
        """AutoGen's text telling a model which functions it may import, and from where."""
        return _autogen_functions.prompt(self._functions, self._functions_module, prompt_template)

    def start(self):
        self.sandbox  # noqa: B018 - creates it now rather than at the first block

    def stop(self):
        """Kill the sandbox if this executor created it; remove the temporary output directory it
        made if nothing was saved there (saved files stay: they are the caller's results)."""
        if self._owns_sandbox and self._sandbox is not None:
            self._sandbox.kill()
            self._sandbox = None
        self._work_dir = None
        if self._owns_output_dir and self.output_dir.is_dir() and not any(self.output_dir.iterdir()):
            self.output_dir.rmdir()

    def restart(self):
        """Fresh Python state. For the default context that restarts the whole sandbox (its
        processes and /tmp go; /workspace stays). work_dir and functions are set up again."""
        self.sandbox.restart_context(self._context or self.sandbox.id)
        self._work_dir = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    # -- serialization (AutoGen's component methods) ------------------------------------------

    def _to_config(self):
        options = {k: v for k, v in self._sandbox_options.items() if k not in ("url", "token")}
        url = self._sandbox.connection.url if self._sandbox is not None else self._sandbox_options.get("url")
        return CellboxCodeExecutorConfig(
            url=url, sandbox_id=None if self._owns_sandbox else self._sandbox.id,
            context=getattr(self._context, "id", self._context), timeout=self.timeout,
            work_dir=self._work_dir_asked, output_dir=None if self._owns_output_dir else str(self.output_dir),
            functions_module=self._functions_module, sandbox_options=options)

    @classmethod
    def _from_config(cls, config):
        """An executor like the one dumped (functions are code, not config: pass them again)."""
        sandbox = Sandbox(config.sandbox_id, url=config.url) if config.sandbox_id else None
        options = dict(config.sandbox_options)
        if sandbox is None and config.url:
            options["url"] = config.url
        return cls(sandbox, timeout=config.timeout, output_dir=config.output_dir, context=config.context,
                   work_dir=config.work_dir, functions_module=config.functions_module, **options)

    # -- running -------------------------------------------------------------------------------

    def execute_code_blocks(self, code_blocks, cancellation_token=None):
        """Run the blocks in order; stop at the first failure. Returns a CellboxCodeResult:
        exit_code 0, 1 (a Python error, output "ERROR: name: value" and the traceback), the
        command's exit code, or 124 for a timeout ("Timeout" appended). Cancelling the token
        interrupts the running block in the sandbox and raises asyncio.CancelledError, as
        AutoGen's CodeExecutor does."""
        return self._execute(list(code_blocks), _Cancellation(cancellation_token))

    def _execute(self, code_blocks, cancellation):
        cancellation.raise_if_cancelled()
        self._prepare()
        outputs, files, code_files = [], [], []
        for block in code_blocks:
            code, language = _block(block)
            exit_code, output = self._run_block(code, language, files, code_files, cancellation)
            outputs.append(output)
            if exit_code != 0:
                return self._result(exit_code, outputs, files, code_files)
        return self._result(0, outputs, files, code_files)

    @staticmethod
    def _result(exit_code, outputs, files, code_files):
        return CellboxCodeResult(exit_code, "\n".join(o for o in outputs if o), files,
                                 code_files[0] if code_files else None)

    def _run_block(self, code, language, files, code_files, cancellation):
        if language not in PYTHON and language not in SHELL:
            return 1, f"unknown language {language!r}: use one of {self.supported_languages}"
        if code.startswith(_FILENAME):
            path = self._code_file_path(code.split("\n", 1)[0][len(_FILENAME):].strip())
            if path is None:
                return 1, f"Filename is not in the workspace: the `{_FILENAME}` path must stay in {self._work_dir}"
            self.sandbox.files.write(path, code)
            code_files.append(path)
        if language in PYTHON:
            return self._run_python(code, files, cancellation)
        return self._run_shell(code, language, cancellation)

    def _code_file_path(self, name):
        """Where a `# filename: x.py` block is saved: inside work_dir, or None if it would leave it."""
        path = posixpath.normpath(posixpath.join(self._work_dir, name))
        return path if name and path.startswith(self._work_dir.rstrip("/") + "/") else None

    def _prepare(self):
        """Once per kernel state: work_dir made, the kernel's cwd and first import path, then the
        functions module written there and imported once to show a broken one at once."""
        if self._work_dir is not None:
            return self._work_dir
        setup = ("import os, sys\n"
                 + (f"os.makedirs({self._work_dir_asked!r}, exist_ok=True)\nos.chdir({self._work_dir_asked!r})\n"
                    if self._work_dir_asked else "")
                 + "sys.path.insert(0, os.getcwd()) if os.getcwd() not in sys.path else None\n"
                 + "print(os.getcwd())")
        # exec in a fresh namespace: the user's globals get no `os` or `sys` they did not import
        execution = self.sandbox.run_code(f"exec({setup!r}, {{}})", context=self._context, timeout_s=self.timeout)
        if execution.error is not None:
            raise ValueError(f"work_dir {self._work_dir_asked!r} could not be made in the sandbox: "
                             f"{execution.error.name}: {execution.error.value}")
        work_dir = "".join(execution.logs.stdout).strip()
        if self._functions:
            self._set_up_functions(work_dir)
        self._work_dir = work_dir
        return work_dir

    def _set_up_functions(self, work_dir):
        packages = _autogen_functions.required_packages(self._functions)
        if packages:
            # --user: into the sandbox user's own site-packages; Debian's Python refuses any
            # pip install (PEP 668) without --break-system-packages, even of what it already has
            install = self.sandbox.commands.run(
                "python3 -m pip install --quiet --disable-pip-version-check --user --break-system-packages "
                + shlex.join(packages),
                cwd=work_dir, timeout_s=max(self.timeout, 300))
            if install.exit_code != 0:
                raise ValueError(f"pip install {' '.join(packages)} failed in the sandbox (exit {install.exit_code}): "
                                 f"{(install.stdout + install.stderr).strip()[-2000:]} - a sandbox has no network "
                                 "unless created with network=True and the daemon allows it")
        module = self._functions_module
        self.sandbox.files.write(posixpath.join(work_dir, f"{module}.py"),
                                 _autogen_functions.module_source(self._functions))
        load = (f"import importlib, sys\nimportlib.invalidate_caches()\nsys.modules.pop({module!r}, None)\n"
                f"importlib.import_module({module!r})")
        execution = self.sandbox.run_code(f"exec({load!r}, {{}})", context=self._context, timeout_s=self.timeout)
        if execution.error is not None:
            raise ValueError(f"the functions module {module}.py failed to load in the sandbox: "
                             f"{execution.error.name}: {execution.error.value}")

    def _run_python(self, code, files, cancellation):
        try:
            execution = self.sandbox.run_code(code, context=self._context, timeout_s=self.timeout,
                                              _cancel=cancellation.event)
        except errors.CellboxError:
            cancellation.raise_if_cancelled()
            raise
        parts = []
        if execution.logs.stdout or execution.logs.stderr:
            parts.append("".join(execution.logs.stdout) + "".join(execution.logs.stderr))
        for result in execution.results:
            parts.extend(self._save_result(result, files))
        output = "\n".join(p.rstrip("\n") for p in parts)
        error = execution.error
        if error is None:
            return 0, output
        if error.name == "TimeoutError":
            return TIMEOUT_EXIT_CODE, (output + "\n" if output else "") + "Timeout"
        if error.name == "KeyboardInterrupt":
            cancellation.raise_if_cancelled()
        trace = error.traceback_text.strip()
        message = f"ERROR: {error.name}: {error.value}" + (f"\n{trace}" if trace else "")
        return 1, (output + "\n" if output else "") + message

    def _save_result(self, result, files):
        """The output lines of one rich result; a PNG and an HTML page are saved in output_dir
        (as AutoGen's Jupyter executor saves them) and listed in `files`."""
        lines = [result.text] if result.text is not None and result.png is None else []
        self.output_dir.mkdir(parents=True, exist_ok=True)  # again, after a stop()
        if result.png is not None:
            path = (self.output_dir / f"{uuid.uuid4().hex}.png").absolute()
            result.save_png(path)
            files.append(path)
            lines.append(f"Image data saved to {path}")
        if result.html is not None:
            path = (self.output_dir / f"{uuid.uuid4().hex}.html").absolute()
            result.save_html(path)
            files.append(path)
            lines.append(f"HTML data saved to {path}")
        return lines

    def _run_shell(self, code, language, cancellation):
        # In the background, so that a cancellation can kill it by id at once (a foreground
        # command dies only with its stream); the daemon keeps the last 1 MiB of each stream.
        shell = "bash" if language in ("bash", "shell") else "sh"
        command = self.sandbox.commands.run(f"{shell} -c {shlex.quote(code)}", cwd=self._work_dir,
                                            timeout_s=self.timeout, background=True)
        cancellation.running(command)
        try:
            result = command.wait(timeout_s=self.timeout + 30)
        finally:
            cancellation.running(None)
            try:
                command.remove()
            except errors.CellboxError:
                pass  # the daemon forgot it already
        cancellation.raise_if_cancelled()
        output = result.stdout + result.stderr
        if result.timed_out:
            return TIMEOUT_EXIT_CODE, output + ("\n" if output and not output.endswith("\n") else "") + "Timeout"
        return result.exit_code, output.rstrip("\n")


_ASYNC_BASES = (_AutoGenCodeExecutor, _AutoGenComponent[CellboxCodeExecutorConfig]) if AUTOGEN_INSTALLED else (_Component,)


class AsyncCellboxCodeExecutor(*_ASYNC_BASES):
    """CellboxCodeExecutor with autogen-core's coroutine interface (the blocking calls run in
    a worker thread). Same arguments. With autogen_core installed it is an
    autogen_core.code_executor.CodeExecutor and an autogen_core Component."""

    component_type = "code_executor"
    component_version = 1
    component_provider_override = PROVIDER
    component_description = _Component.component_description
    component_config_schema = CellboxCodeExecutorConfig
    supported_languages = CellboxCodeExecutor.supported_languages

    def __init__(self, sandbox=None, **options):
        self.sync = CellboxCodeExecutor(sandbox, **options)

    @property
    def output_dir(self):
        return self.sync.output_dir

    @property
    def timeout(self):
        return self.sync.timeout

    @property
    def functions(self):
        return self.sync.functions

    @property
    def functions_module(self):
        return self.sync.functions_module

    @property
    def work_dir(self):
        """The working directory inside the sandbox (asks the sandbox the first time: await
        start() or a first execute_code_blocks before reading it from the event loop)."""
        return self.sync.work_dir

    def format_functions_for_prompt(self, prompt_template=FUNCTION_PROMPT_TEMPLATE):
        return self.sync.format_functions_for_prompt(prompt_template)

    async def execute_code_blocks(self, code_blocks, cancellation_token=None):
        cancellation = _Cancellation(cancellation_token)
        future = asyncio.ensure_future(asyncio.to_thread(self.sync._execute, list(code_blocks), cancellation))
        if cancellation_token is not None and hasattr(cancellation_token, "link_future"):
            cancellation_token.link_future(future)
        try:
            return await future
        except asyncio.CancelledError:
            cancellation.cancel()   # also when the caller's task was cancelled: interrupt the cell
            raise

    async def start(self):
        await asyncio.to_thread(self.sync.start)
        await asyncio.to_thread(self.sync._prepare)

    async def stop(self):
        await asyncio.to_thread(self.sync.stop)

    async def restart(self):
        await asyncio.to_thread(self.sync.restart)

    async def __aenter__(self):
        await self.start()
        return self

    async def __aexit__(self, *exc):
        await self.stop()
        return None

    def _to_config(self):
        return self.sync._to_config()

    @classmethod
    def _from_config(cls, config):
        executor = cls.__new__(cls)
        executor.sync = CellboxCodeExecutor._from_config(config)
        return executor
