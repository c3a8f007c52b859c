// Drives envd's process service in cellboxd (api/envd_process.c) with E2B's official SDK,
// unchanged, pointed at cellboxd by the environment alone:
//
//   E2B_API_URL=http://127.0.0.1:8888 E2B_SANDBOX_URL=http://127.0.0.1:8888 \
//   E2B_API_KEY=<cellbox token> node e2b_commands.mjs
//
// sandbox.commands: run in the foreground (stdout, stderr, exit code, onStdout/onStderr, bytes
// that only decode whole, a non-zero exit as CommandExitError, envs, cwd, timeoutMs), in the
// background (pid, list, sendStdin + closeStdin, a second handle by connect(pid), kill);
// sandbox.pty (create with a size, sendInput echoed back, resize seen by `stty size`, kill); a
// command ended by its sandbox's death. Prints one JSON summary line, {"ok", "steps": {name:
// {ok, ...}}}, and exits 0 when every step passed, 1 otherwise, 2 on a hang (global deadline).
// tests/clients/test_e2b_commands.py checks each step's details again.
import { Sandbox, CommandExitError } from '@e2b/code-interpreter';

import { scenario, until } from './scenario.mjs';

const { step, finish } = scenario('e2b_commands.mjs');


// What a promise of a command's end gives: its result, or the error it threw, as data.
async function outcome(promise) {
  try {
    const result = await promise;
    return { threw: null, exitCode: result.exitCode, stdout: result.stdout, stderr: result.stderr,
             error: result.error ?? null };
  } catch (err) {
    return { threw: err?.name, is_exit_error: err instanceof CommandExitError,
             exitCode: err?.exitCode ?? null, stdout: err?.stdout ?? null,
             stderr: err?.stderr ?? null, error: err?.error ?? err?.message ?? null };
  }
}

let sandbox;
await step('create', async () => {
  sandbox = await Sandbox.create({ timeoutMs: 300_000 });
  return { sandbox_id: sandbox.sandboxId, ok: !!sandbox.sandboxId };
});

if (sandbox) {
  await step('foreground', async () => {
    const seen = { stdout: [], stderr: [] };
    const result = await sandbox.commands.run('echo hello; echo oops >&2; echo $$', {
      onStdout: data => seen.stdout.push(data), onStderr: data => seen.stderr.push(data) });
    const lines = result.stdout.split('\n');
    return { stdout: result.stdout, stderr: result.stderr, exit_code: result.exitCode,
             error: result.error ?? null, callback_stdout: seen.stdout.join(''),
             callback_stderr: seen.stderr.join(''), shell_pid: Number(lines[1]),
             ok: lines[0] === 'hello' && result.exitCode === 0 };
  });

  await step('bytes', async () => {
    // a NUL and a stray byte, then a euro sign split across two writes: the SDK decodes the
    // stream itself, so the server must pass bytes, not text
    const result = await sandbox.commands.run(
      "printf 'a\\000b\\377c\\n'; printf '\\342\\202'; sleep 0.2; printf '\\254\\n'");
    return { stdout_codes: [...result.stdout].map(ch => ch.codePointAt(0)), ok: result.exitCode === 0 };
  });

  await step('exit_error', async () => {
    const ended = await outcome(sandbox.commands.run('echo out; echo err >&2; exit 7'));
    return { ...ended, ok: ended.is_exit_error === true };
  });

  await step('envs_and_cwd', async () => {
    const envs = await sandbox.commands.run('echo $GREETING-$HOME_AWAY', {
      envs: { GREETING: 'hi there', HOME_AWAY: 'yes' } });
    const cwd = await sandbox.commands.run('pwd', { cwd: '/tmp' });
    const home = await sandbox.commands.run('pwd');
    const missing = await outcome(sandbox.commands.run('pwd', { cwd: '/no/such/dir' }));
    return { envs: envs.stdout, cwd: cwd.stdout, default_cwd: home.stdout,
             missing_threw: missing.threw, missing_error: missing.error, ok: true };
  });

  await step('timeout', async () => {
    const ended = await outcome(sandbox.commands.run('sleep 60', { timeoutMs: 1500 }));
    // the client gave up at its deadline; the server kills the command at the same deadline,
    // and the kill is seen once the process has been reaped
    let sleepers = -1;
    for (let i = 0; i < 100 && sleepers !== 0; i++) {
      if (i) await new Promise(resolve => setTimeout(resolve, 50));
      sleepers = (await sandbox.commands.list()).filter(p => p.args?.includes('sleep 60')).length;
    }
    return { threw: ended.threw, error: ended.error, sleepers_left: sleepers,
             ok: ended.threw !== null };
  });

  await step('background', async () => {
    // `cat` ends only at end of file: the closeStdin
    const script = 'read line; echo got:$line; read again; echo end:$again; cat; echo eof';
    const first = await sandbox.commands.run(script, { background: true, stdin: true });
    const listed = (await sandbox.commands.list()).find(p => p.pid === first.pid);
    const later = [];
    const second = await sandbox.commands.connect(first.pid, { onStdout: data => later.push(data) });
    await first.sendStdin('one\n');
    await until(() => later.join('').includes('got:one'));
    await sandbox.commands.sendStdin(first.pid, 'two\n');
    await sandbox.commands.closeStdin(first.pid);
    const [a, b] = await Promise.all([outcome(first.wait()), outcome(second.wait())]);
    const gone = !(await sandbox.commands.list()).some(p => p.pid === first.pid);
    return { pid: first.pid, listed: listed ?? null, first: a, second: b, second_callbacks: later.join(''),
             gone_from_list: gone, ok: a.exitCode === 0 && b.exitCode === 0 };
  });

  await step('kill', async () => {
    const sleeper = await sandbox.commands.run('sleep 300', { background: true, timeoutMs: 0 });
    const listed = (await sandbox.commands.list()).some(p => p.pid === sleeper.pid);
    const killed = await sandbox.commands.kill(sleeper.pid);
    const ended = await outcome(sleeper.wait());
    const again = await sandbox.commands.kill(sleeper.pid);
    const connectGone = await outcome(sandbox.commands.connect(sleeper.pid));
    return { listed, killed, ended, killed_again: again, connect_after: connectGone.threw,
             ok: killed === true && again === false };
  });

  await step('pty', async () => {
    const decoder = new TextDecoder();
    let screen = '';
    const terminal = await sandbox.pty.create({ cols: 80, rows: 24, timeoutMs: 0,
                                                onData: data => { screen += decoder.decode(data, { stream: true }); } });
    const encode = text => new TextEncoder().encode(text);
    await sandbox.pty.sendInput(terminal.pid, encode('echo hi-from-$((6*7))\n'));
    const echoed = await until(() => screen.includes('hi-from-42'));
    await sandbox.pty.sendInput(terminal.pid, encode('stty size; tty\n'));
    const sized = await until(() => screen.includes('24 80'));
    await sandbox.pty.resize(terminal.pid, { cols: 100, rows: 30 });
    await sandbox.pty.sendInput(terminal.pid, encode('stty size\n'));
    const resized = await until(() => screen.includes('30 100'));
    const listed = (await sandbox.commands.list()).find(p => p.pid === terminal.pid);
    const killed = await sandbox.pty.kill(terminal.pid);
    const ended = await outcome(terminal.wait());
    return { echoed, sized, resized, on_pts: /\/dev\/pts\/\d+/.test(screen), listed: listed ?? null,
             killed, ended, ok: echoed && sized && resized && killed === true };
  });

  await step('sandbox_death', async () => {
    const sleeper = await sandbox.commands.run('sleep 300', { background: true, timeoutMs: 0 });
    const waiting = outcome(sleeper.wait());
    const killed = await sandbox.kill();
    const ended = await waiting;
    return { killed, ended, ok: killed === true && ended.threw !== null };
  });
}

finish();
