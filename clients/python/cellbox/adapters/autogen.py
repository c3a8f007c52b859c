"""A code executor with AutoGen's shape, backed by a cellbox sandbox — without importing
AutoGen. Python blocks run in one persistent kernel (variables survive from one call to the
next, like DockerJupyterCodeExecutor); bash/sh blocks run as shell commands in the same sandbox
(same files). The first failing block stops the batch.

    from cellbox.adapters.autogen import CellboxCodeExecutor, CodeBlock

    with CellboxCodeExecutor(output_dir="out") as executor:
        executor.execute_code_blocks([CodeBlock(code="x = 1 + 2", language="python")])
        result = executor.execute_code_blocks([{"code": "print(x)", "language": "python"}])
        result.exit_code, result.output        # 0, "3"

AsyncCellboxCodeExecutor has the coroutine interface of autogen-core's CodeExecutor
(execute_code_blocks(code_blocks, cancellation_token), start, stop, restart, `async with`), so
AutoGen's CodeExecutorAgent can use it as its code_executor.
"""
import asyncio
import re
import shlex
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

from ..sandbox import Sandbox

PYTHON = ("python", "python3", "py", "")
SHELL = ("bash", "shell", "sh")
TIMEOUT_EXIT_CODE = 124   # AutoGen's command-line executors use it for a timeout

_CODE_BLOCK = re.compile(r"```[ \t]*([\w+\-]*)[^\n]*\n(.*?)```", re.DOTALL)


@dataclass
class CodeBlock:
    """A block of code as AutoGen's CodeBlock (any object with .code and .language works,
    and so does a dict)."""

    code: str
    language: str = "python"


@dataclass
class CellboxCodeResult:
    """AutoGen's CodeResult (exit_code, output) plus the files written for rich results."""

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


class CellboxCodeExecutor:
    """Runs code blocks in a cellbox sandbox.

    sandbox: an existing Sandbox to use (left alone at the end); without it one is created at
    first use (Sandbox.create(**sandbox_options): url, token, timeout_s (default 3600),
    limits, ...) and killed by stop() / the end of the `with` block. context: a context of the
    sandbox to run python in (default: its default context). timeout: seconds per block.
    output_dir: where images are saved (created; default a new temp dir)."""

    supported_languages = list(PYTHON[:-1] + SHELL)

    def __init__(self, sandbox=None, *, timeout=60, output_dir=None, context=None, **sandbox_options):
        self._sandbox = sandbox
        self._owns_sandbox = sandbox is None
        self._sandbox_options = {"timeout_s": 3600, **sandbox_options}
        self._context = context
        self.timeout = timeout
        self._owns_output_dir = not output_dir
        self.output_dir = Path(output_dir) if output_dir else Path(tempfile.mkdtemp(prefix="cellbox-autogen-"))
        self.output_dir.mkdir(parents=True, exist_ok=True)

    @property
    def sandbox(self):
        """The sandbox the code runs in (created on first use)."""
        if self._sandbox is None:
            self._sandbox = Sandbox.create(**self._sandbox_options)
        return self._sandbox

    def start(self):
        self.sandbox  # noqa: B018 - creates it now rather than at the first block

    def stop(self):
        """Kill the sandbox if this executor created it; remove the temporary output directory it
        made if nothing was saved there (saved images stay: they are the caller's results)."""
        if self._owns_sandbox and self._sandbox is not None:
            self._sandbox.kill()
            self._sandbox = None
        if self._owns_output_dir and self.output_dir.is_dir() and not any(self.output_dir.iterdir()):
            self.output_dir.rmdir()

    def restart(self):
        """Fresh Python state. For the default context that restarts the whole sandbox (its
        processes and /tmp go; /workspace stays)."""
        self.sandbox.restart_context(self._context or self.sandbox.id)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def execute_code_blocks(self, code_blocks, cancellation_token=None):
        """Run the blocks in order; stop at the first failure. Returns a CellboxCodeResult:
        exit_code 0, 1 (a Python error, output "ERROR: name: value" and the traceback), the
        command's exit code, or 124 for a timeout ("Timeout" appended)."""
        outputs, files = [], []
        for block in code_blocks:
            code, language = _block(block)
            if language in PYTHON:
                exit_code, output = self._run_python(code, files)
            elif language in SHELL:
                exit_code, output = self._run_shell(code, language)
            else:
                exit_code, output = 1, f"unknown language {language!r}: use one of {self.supported_languages}"
            outputs.append(output)
            if exit_code != 0:
                return CellboxCodeResult(exit_code, "\n".join(o for o in outputs if o), files)
        return CellboxCodeResult(0, "\n".join(o for o in outputs if o), files)

    def _run_python(self, code, files):
        execution = self.sandbox.run_code(code, context=self._context, timeout_s=self.timeout)
        parts = []
        if execution.logs.stdout or execution.logs.stderr:
            parts.append("".join(execution.logs.stdout) + "".join(execution.logs.stderr))
        for result in execution.results:
            if result.png is not None:
                self.output_dir.mkdir(parents=True, exist_ok=True)  # again, after a stop()
                path = self.output_dir / f"{uuid.uuid4().hex}.png"
                result.save_png(path)
                files.append(path)
                parts.append(f"Image data saved to {path}")
            elif result.text is not None:
                parts.append(result.text)
        output = "\n".join(p.rstrip("\n") for p in parts)
        error = execution.error
        if error is None:
            return 0, output
        if error.name == "TimeoutError":
            return TIMEOUT_EXIT_CODE, (output + "\n" if output else "") + "Timeout"
        trace = error.traceback_text.strip()
        message = f"ERROR: {error.name}: {error.value}" + (f"\n{trace}" if trace else "")
        return 1, (output + "\n" if output else "") + message

    def _run_shell(self, code, language):
        shell = "bash" if language in ("bash", "shell") else "sh"
        result = self.sandbox.commands.run(f"{shell} -c {shlex.quote(code)}", timeout_s=self.timeout)
        output = result.stdout + result.stderr
        if result.timed_out:
            return TIMEOUT_EXIT_CODE, output + ("\n" if output and not output.endswith("\n") else "") + "Timeout"
        return result.exit_code, output.rstrip("\n")


class AsyncCellboxCodeExecutor:
    """CellboxCodeExecutor with autogen-core's coroutine interface (the blocking calls run in
    a worker thread). Same arguments."""

    supported_languages = CellboxCodeExecutor.supported_languages

    def __init__(self, sandbox=None, **options):
        self.sync = CellboxCodeExecutor(sandbox, **options)

    @property
    def output_dir(self):
        return self.sync.output_dir

    @property
    def timeout(self):
        return self.sync.timeout

    async def execute_code_blocks(self, code_blocks, cancellation_token=None):
        future = asyncio.ensure_future(asyncio.to_thread(self.sync.execute_code_blocks, list(code_blocks)))
        if cancellation_token is not None and hasattr(cancellation_token, "link_future"):
            cancellation_token.link_future(future)
        return await future

    async def start(self):
        await asyncio.to_thread(self.sync.start)

    async def stop(self):
        await asyncio.to_thread(self.sync.stop)

    async def restart(self):
        await asyncio.to_thread(self.sync.restart)

    async def __aenter__(self):
        await self.start()
        return self

    async def __aexit__(self, *exc):
        await self.stop()
