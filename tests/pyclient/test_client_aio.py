"""cellbox.aio: the same API as coroutines; callbacks (plain or async) run on the event loop,
live; cancelling run_code interrupts the cell; `async with` deletes the sandbox."""
import asyncio
import threading
import time

import pytest

import cellbox
from cellbox.aio import AsyncCommandHandle, AsyncSandbox


def run(coro):
    return asyncio.run(coro)


def test_async_sandbox_end_to_end(conn, tmp_path):
    async def main():
        async with await AsyncSandbox.create(metadata={"case": "aio"}, **conn) as sb:
            assert sb.id == sb.sandbox_id and (await sb.info()).state == "running"
            assert [s.id for s in await AsyncSandbox.list(metadata={"case": "aio"}, **conn)] == [sb.id]
            other = await AsyncSandbox.connect(sb.id, **conn)
            await sb.run_code("x = 20")
            assert (await other.run_code("x + 1")).text == "21"

            loop_thread = threading.current_thread()
            seen = []

            async def on_stdout(message):          # a coroutine callback
                seen.append((str(message), time.monotonic(), threading.current_thread() is loop_thread))

            errors = []
            execution = await sb.run_code("import time\nprint('a', flush=True)\ntime.sleep(1)\nprint('b')\n1/0",
                                          on_stdout=on_stdout, on_error=errors.append)
            ended = time.monotonic()
            assert [s for s, _, _ in seen] == ["a\n", "b\n"]
            assert all(on_loop for _, _, on_loop in seen)
            assert ended - seen[0][1] >= 0.8           # live, not replayed at the end
            assert execution.error.name == "ZeroDivisionError" and errors == [execution.error]

            ctx = await sb.create_context(cwd="/tmp")
            assert [c.id for c in await sb.list_contexts()] == [sb.id, ctx.id]
            await sb.run_code("y = 1", context=ctx)
            await sb.restart_context(ctx)
            assert (await sb.run_code("'y' in globals()", context=ctx)).text == "False"
            await sb.remove_context(ctx)

            await sb.files.write("a/b.txt", "text")
            assert await sb.files.read("a/b.txt") == b"text"
            assert await sb.files.read_text("a/b.txt") == "text"
            await sb.files.write_many([("a/c.txt", "c")])
            assert [e.name for e in await sb.files.list("a")] == ["b.txt", "c.txt"]
            assert (await sb.files.stat("a/c.txt")).size == 1 and await sb.files.exists("a/c.txt")
            await sb.files.make_dir("d")
            await sb.files.move("a/c.txt", "d/c.txt")
            await sb.files.rename("d/c.txt", "d/e.txt")
            await sb.files.remove("d", recursive=True)
            (tmp_path / "up").mkdir()
            (tmp_path / "up" / "f.txt").write_text("up")
            await sb.files.upload_dir(str(tmp_path / "up"), "up")
            assert await sb.files.download_dir("up", str(tmp_path / "down")) == [str(tmp_path / "down" / "f.txt")]

            lines = []
            result = await sb.commands.run("echo hi; exit 2", on_stdout=lines.append)
            assert (result.exit_code, lines) == (2, ["hi\n"])
            handle = await sb.commands.run("cat", background=True)
            assert isinstance(handle, AsyncCommandHandle)
            await handle.send_stdin("abc")
            assert handle.id in [c.id for c in await sb.commands.list()]
            await handle.close_stdin()
            assert (await handle.wait(timeout_s=10)).stdout == "abc"
            assert (await handle.output()).exit_code == 0 and (await handle.info()).state == "exited"
            again = await sb.commands.connect(handle.id)
            await again.remove()
            sleeper = await sb.commands.run("sleep 30", background=True)
            await sleeper.signal("SIGTERM")
            assert (await sleeper.wait(10)).signal == "SIGTERM"
            sleeper = await sb.commands.run("sleep 30", background=True)
            assert await sleeper.kill() is True
            sleeper = await sb.commands.run("sleep 30", background=True)
            await sb.commands.send_stdin(sleeper.id, "ignored")
            assert await sb.commands.kill(sleeper.id) is True

            await sb.set_timeout(0)
            assert (await sb.pause()).state == "paused"
            with pytest.raises(cellbox.SandboxPausedError):
                await sb.run_code("1")
            assert (await sb.resume()).state == "running"
            assert await sb.is_running()
            assert any(e["source"] == "execute" for e in await sb.get_logs())
            sid = sb.id
        return sid

    sid = run(main())
    with pytest.raises(cellbox.NotFoundError):
        cellbox.Sandbox.connect(sid, **conn)


def test_cancelling_run_code_interrupts_the_cell(conn):
    async def main():
        async with await AsyncSandbox.create(**conn) as sb:
            task = asyncio.ensure_future(sb.run_code("import time\ntime.sleep(30)\ndone = True"))
            await asyncio.sleep(0.5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # the worker thread leaves the stream at its next line (a keepalive at the latest,
            # 5 s of quiet), which interrupts the cell; the next cell runs after it
            started = time.monotonic()
            assert (await sb.run_code("'done' in globals()")).text == "False"
            assert time.monotonic() - started < 10

    run(main())


def test_async_stateless_run(conn):
    result = run(cellbox.aio.run("print(2 + 2)", **conn))
    assert result.ok and result.stdout == "4\n"
