// Drives cellboxd's envd WatchDir and polling watchers with E2B's official SDK, unchanged,
// pointed at cellboxd by the environment alone (as e2b_client.mjs is):
//
//   E2B_API_URL=http://127.0.0.1:8888 E2B_SANDBOX_URL=http://127.0.0.1:8888 \
//   E2B_API_KEY=<cellbox token> node e2b_watch.mjs
//
// files.watchDir sees files made, written, renamed and removed by files.write/rename/remove, by
// runCode and by cellbox's /v1 files API, in subdirectories when recursive; handle.stop() ends
// it; a missing directory is the SDK's NotFoundError; the polling watchers (CreateWatcher,
// GetWatcherEvents, RemoveWatcher) by raw Connect calls. Prints one JSON summary line,
// {"ok", "steps": {name: {ok, ...}}}, exits 0 when every step passed, 1 otherwise, 2 on a hang
// (global deadline). tests/clients/test_e2b_watch.py checks each step's details again.
import { Sandbox } from '@e2b/code-interpreter';
import { NotFoundError } from 'e2b';

import { scenario, sleep, until } from './scenario.mjs';

const { step, finish } = scenario('e2b_watch.mjs', { deadlineMs: 100000 });

const seen = (events, type, name) => events.some(e => e.type === type && e.name === name);

// A raw Connect unary call into the sandbox's envd, as the SDK's transport makes it.
async function envd(sandbox, method, message) {
  const response = await fetch(`${process.env.E2B_SANDBOX_URL}/filesystem.Filesystem/${method}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'Connect-Protocol-Version': '1',
               'E2b-Sandbox-Id': sandbox.sandboxId, 'E2b-Sandbox-Port': '49983',
               'X-Access-Token': process.env.E2B_API_KEY },
    body: JSON.stringify(message),
  });
  return { status: response.status, body: await response.json() };
}

let sandbox;
await step('create', async () => {
  sandbox = await Sandbox.create({ timeoutMs: 120_000 });
  return { sandbox_id: sandbox.sandboxId, ok: !!sandbox.sandboxId };
});

if (sandbox) {
  await step('watch', async () => {
    await sandbox.files.makeDir('/workspace/watched');
    const events = [];
    let exited = 'not yet';
    const handle = await sandbox.files.watchDir('/workspace/watched', e => { events.push(e); },
                                                { recursive: true, onExit: err => { exited = err ? `${err.name}` : null; } });
    await sandbox.files.write('/workspace/watched/sdk.txt', 'from the SDK');
    await sandbox.runCode("open('/workspace/watched/code.txt', 'w').write('from runCode')");
    const v1 = await fetch(`${process.env.E2B_API_URL}/v1/sandboxes/${sandbox.sandboxId}/files?path=/workspace/watched/v1.txt`,
                           { method: 'PUT', headers: { Authorization: `token ${process.env.E2B_API_KEY}` }, body: 'from /v1' });
    await sandbox.files.rename('/workspace/watched/sdk.txt', '/workspace/watched/renamed.txt');
    await sandbox.files.remove('/workspace/watched/renamed.txt');
    await sandbox.files.makeDir('/workspace/watched/sub');
    await sandbox.files.write('/workspace/watched/sub/deep.txt', 'deeper');
    const complete = await until(() => seen(events, 'write', 'sub/deep.txt') &&
                                       seen(events, 'remove', 'renamed.txt') &&
                                       seen(events, 'write', 'v1.txt') && seen(events, 'write', 'code.txt'));
    await handle.stop();
    const countAtStop = events.length;
    await sandbox.files.write('/workspace/watched/after-stop.txt', 'unseen');
    await sleep(500);
    const pairs = events.map(e => `${e.type}:${e.name}`);
    return { events: pairs, v1_status: v1.status, after_stop: events.length - countAtStop, exited,
             ok: complete && events.length === countAtStop };
  });

  await step('watch_missing', async () => {
    try {
      await sandbox.files.watchDir('/workspace/no-such-dir', () => {});
      return { error: null, ok: false };
    } catch (err) {
      return { error: err.name, not_found: err instanceof NotFoundError, ok: err instanceof NotFoundError };
    }
  });

  await step('polling', async () => {
    await sandbox.files.makeDir('/workspace/polled');
    const created = await envd(sandbox, 'CreateWatcher', { path: '/workspace/polled' });
    const id = created.body.watcherId;
    await sandbox.files.write('/workspace/polled/one.txt', '1');
    const events = [];
    for (let i = 0; i < 100 && !events.some(e => e.type === 'EVENT_TYPE_WRITE'); i++) {
      const got = await envd(sandbox, 'GetWatcherEvents', { watcherId: id });
      events.push(...(got.body.events || []));
      if (!events.some(e => e.type === 'EVENT_TYPE_WRITE'))
        await sleep(50);
    }
    const removed = await envd(sandbox, 'RemoveWatcher', { watcherId: id });
    const after = await envd(sandbox, 'GetWatcherEvents', { watcherId: id });
    return { created_status: created.status, id_given: typeof id === 'string' && id.length > 0,
             events: events.map(e => `${e.type}:${e.name}`), removed: removed.body,
             after_status: after.status, after_code: after.body.code,
             ok: created.status === 200 && after.body.code === 'not_found' };
  });

  await step('kill', async () => ({ killed: await sandbox.kill(), ok: true }));
}

finish();
