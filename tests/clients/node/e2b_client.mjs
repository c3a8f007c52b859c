// Drives cellboxd with E2B's official SDK (@e2b/code-interpreter, which wraps `e2b`), unchanged,
// pointed at cellboxd by the environment alone:
//
//   E2B_API_URL=http://127.0.0.1:8888 E2B_SANDBOX_URL=http://127.0.0.1:8888 \
//   E2B_API_KEY=<cellbox token> node e2b_client.mjs
//
// An agent's scenario: a sandbox created with metadata, state kept between runCode calls, a
// print, an error, a matplotlib chart, streaming callbacks, a second context (state apart from
// the default one), files written and read, the sandbox listed, looked up and its timeout set,
// then killed. Prints one JSON summary line, {"ok", "steps": {name: {ok, ...}}}, and exits 0
// when every step passed, 1 otherwise, 2 on a hang (global deadline). The pytest side
// (tests/clients/test_e2b_sdk.py) checks each step's details again.
import { Sandbox } from '@e2b/code-interpreter';

import { scenario } from './scenario.mjs';

const { step, finish } = scenario('e2b_client.mjs');


const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
let sandbox;
await step('create', async () => {
  sandbox = await Sandbox.create({ metadata: { purpose: 'cellbox-e2b-test' }, timeoutMs: 120_000 });
  return { sandbox_id: sandbox.sandboxId, ok: !!sandbox.sandboxId };
});

if (sandbox) {
  await step('state', async () => {
    const first = await sandbox.runCode('x = 1+2');
    const second = await sandbox.runCode('x');
    return { text: second.text, execution_count: second.executionCount,
             first_error: first.error?.name ?? null, ok: second.text === '3' };
  });

  await step('print', async () => {
    const execution = await sandbox.runCode("print('hello from e2b')");
    return { stdout: execution.logs.stdout, ok: execution.logs.stdout.join('') === 'hello from e2b\n' };
  });

  await step('error', async () => {
    const execution = await sandbox.runCode('1/0');
    return { name: execution.error?.name, value: execution.error?.value,
             has_traceback: (execution.error?.traceback || '').includes('ZeroDivisionError'),
             ok: execution.error?.name === 'ZeroDivisionError' };
  });

  await step('chart', async () => {
    const execution = await sandbox.runCode(
      'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title("e2b")\nplt.show()');
    const png = execution.results.find(r => r.png)?.png;
    const bytes = png ? Buffer.from(png, 'base64') : Buffer.alloc(0);
    return { results: execution.results.length, formats: execution.results.map(r => r.formats()),
             png_bytes: bytes.length, error: execution.error?.value ?? null,
             ok: bytes.subarray(0, 8).equals(PNG_SIGNATURE) };
  });

  await step('streaming', async () => {
    const lines = [];
    const results = [];
    const execution = await sandbox.runCode(
      'import time\nfor i in range(3):\n    print("line", i, flush=True)\n    time.sleep(0.2)\n"done"',
      { onStdout: (message) => lines.push(message.line), onResult: (result) => results.push(result.text) });
    return { lines, results, text: execution.text,
             ok: lines.join('') === 'line 0\nline 1\nline 2\n' && results.includes("'done'") };
  });

  await step('context', async () => {
    const context = await sandbox.createCodeContext();
    await sandbox.runCode('y = "in the second context"', { context });
    const there = await sandbox.runCode('y', { context });
    const here = await sandbox.runCode('y');
    const listed = await sandbox.listCodeContexts();
    await sandbox.restartCodeContext(context);
    const restarted = await sandbox.runCode('y', { context });
    await sandbox.removeCodeContext(context);
    const after = await sandbox.listCodeContexts();
    return { context_id: context.id, language: context.language, there: there.text,
             here_error: here.error?.name ?? null, listed: listed.length,
             restarted_error: restarted.error?.name ?? null, after: after.length,
             ok: there.text === "'in the second context'" && here.error?.name === 'NameError' &&
                 listed.length === 2 && restarted.error?.name === 'NameError' && after.length === 1 };
  });

  await step('files', async () => {
    const info = await sandbox.files.write('/workspace/notes/hello.txt', 'hello, files\n');
    const text = await sandbox.files.read('/workspace/notes/hello.txt');
    const seen = await sandbox.runCode('open("/workspace/notes/hello.txt").read()');
    const bytes = Uint8Array.from([0, 1, 2, 255]);
    await sandbox.files.write('/workspace/data.bin', bytes);
    const back = await sandbox.files.read('/workspace/data.bin', { format: 'bytes' });
    const many = await sandbox.files.write([
      { path: '/workspace/a.txt', data: 'A' }, { path: '/workspace/b.txt', data: 'B' }]);
    let missing = null;
    try {
      await sandbox.files.read('/workspace/does-not-exist.txt');
    } catch (err) {
      missing = err.name;
    }
    return { written: info, text, seen: seen.text, bytes: Array.from(back), many: many.length,
             missing,
             ok: text === 'hello, files\n' && info.path === '/workspace/notes/hello.txt' &&
                 seen.text === "'hello, files\\n'" && Array.from(back).join() === '0,1,2,255' &&
                 many.length === 2 && missing === 'FileNotFoundError' };
  });

  // envd's filesystem.Filesystem over Connect-RPC (files.list, exists, getInfo, makeDir, rename,
  // remove): the SDK's own calls and error classes.
  await step('fs_methods', async () => {
    const made = await sandbox.files.makeDir('/workspace/tree/sub');
    const again = await sandbox.files.makeDir('/workspace/tree/sub');
    await sandbox.files.write('/workspace/tree/top.txt', 'top');
    await sandbox.files.write('/workspace/tree/sub/deep.txt', 'deeper');
    const one = (await sandbox.files.list('/workspace/tree')).map(e => `${e.type}:${e.path}`);
    const two = (await sandbox.files.list('/workspace/tree', { depth: 2 })).map(e => `${e.type}:${e.path}`);
    const relative = (await sandbox.files.list('tree')).map(e => e.path);
    const exists = await sandbox.files.exists('/workspace/tree/top.txt');
    const absent = await sandbox.files.exists('/workspace/tree/nothing.txt');
    const file = await sandbox.files.getInfo('/workspace/tree/top.txt');
    const dir = await sandbox.files.getInfo('/workspace/tree/sub');
    const renamed = await sandbox.files.rename('/workspace/tree/top.txt', '/workspace/tree/moved.txt');
    const movedText = await sandbox.files.read('/workspace/tree/moved.txt');
    await sandbox.files.remove('/workspace/tree/moved.txt');
    const fileGone = !(await sandbox.files.exists('/workspace/tree/moved.txt'));
    await sandbox.files.remove('/workspace/tree/sub');
    const dirGone = !(await sandbox.files.exists('/workspace/tree/sub'));
    const errorOf = async (call) => { try { await call(); return null; } catch (err) { return err.name; } };
    const missingInfo = await errorOf(() => sandbox.files.getInfo('/workspace/no/such/file'));
    const missingList = await errorOf(() => sandbox.files.list('/workspace/no-such-dir'));
    const missingRename = await errorOf(() => sandbox.files.rename('/workspace/nope', '/workspace/nope2'));
    const missingRemove = await errorOf(() => sandbox.files.remove('/workspace/nope'));
    const plain = (info) => ({ ...info, modifiedTime: info.modifiedTime?.toISOString() });
    return { made, again, one, two, relative, exists, absent, file: plain(file), dir: plain(dir),
             renamed: plain(renamed), moved_text: movedText, file_gone: fileGone, dir_gone: dirGone,
             missing: { info: missingInfo, list: missingList, rename: missingRename, remove: missingRemove },
             ok: made === true && again === false && exists === true && absent === false &&
                 fileGone && dirGone && missingInfo === 'FileNotFoundError' };
  });

  // A link a sandboxed program plants towards a host path: every files method stays inside the
  // sandbox (the pytest side checks the host directory is untouched).
  if (process.env.CELLBOX_HOST_DIR) {
    await step('fs_escape', async () => {
      const host = process.env.CELLBOX_HOST_DIR;
      await sandbox.runCode(`import os\nos.symlink(${JSON.stringify(host)}, "/workspace/out")\n` +
                            `os.symlink("../../../../../../..${host}", "/workspace/out-relative")`);
      const errorOf = async (call) => { try { await call(); return null; } catch (err) { return err.name; } };
      const results = {};
      for (const link of ['/workspace/out', '/workspace/out-relative']) {
        results[link] = {
          list: await errorOf(() => sandbox.files.list(link)),
          info: await errorOf(() => sandbox.files.getInfo(`${link}/secret.txt`)),
          exists: await sandbox.files.exists(`${link}/secret.txt`),
          remove: await errorOf(() => sandbox.files.remove(`${link}/secret.txt`)),
          rename: await errorOf(() => sandbox.files.rename(`${link}/secret.txt`, '/workspace/stolen.txt')),
          make_dir: await errorOf(() => sandbox.files.makeDir(`${link}/planted`)),
          rename_in: await errorOf(() => sandbox.files.rename('/workspace/a.txt', `${link}/planted.txt`)),
        };
      }
      const linkInfo = await sandbox.files.getInfo('/workspace/out');
      return { results, link_type: linkInfo.type, link_target: linkInfo.symlinkTarget,
               stolen: await sandbox.files.exists('/workspace/stolen.txt'),
               ok: Object.values(results).every(r => r.exists === false && r.info === 'FileNotFoundError') };
    });
  }

  await step('list', async () => {
    const paginator = Sandbox.list({ query: { metadata: { purpose: 'cellbox-e2b-test' } } });
    const items = await paginator.nextItems();
    const mine = items.find(s => s.sandboxId === sandbox.sandboxId);
    return { count: items.length, state: mine?.state, metadata: mine?.metadata, ok: !!mine && mine.state === 'running' };
  });

  await step('info_and_timeout', async () => {
    const before = await sandbox.getInfo();
    await sandbox.setTimeout(600_000);
    const after = await sandbox.getInfo();
    const left_s = (after.endAt.getTime() - Date.now()) / 1000;
    return { template: before.templateId, state: after.state, left_s, running: await sandbox.isRunning(),
             ok: left_s > 500 && left_s <= 601 && after.state === 'running' };
  });

  await step('kill', async () => {
    const killed = await sandbox.kill();
    const running = await sandbox.isRunning();
    const again = await Sandbox.kill(sandbox.sandboxId);
    return { killed, running, again, ok: killed === true && running === false && again === false };
  });
}

finish();
