// E2B's snapshots and forks against cellboxd, with the official SDK unchanged (issue 24):
//
//   E2B_API_URL=http://127.0.0.1:8888 E2B_SANDBOX_URL=http://127.0.0.1:8888 \
//   E2B_API_KEY=<cellbox token> node e2b_snapshots.mjs
//
// A sandbox holding live state (a variable, a file) snapshotted with createSnapshot; the
// snapshots listed (all, by sandbox, by name, a page at a time); a new sandbox made from one
// with Sandbox.create(snapshotId), holding the state of the moment it was taken; forks of the
// running sandbox (sandbox.fork and Sandbox.fork) diverging independently; the errors a wrong
// fork or a missing snapshot gives; deleteSnapshot; a hibernated sandbox seen as paused, woken
// by a call into it and by Sandbox.connect. Prints one JSON summary line, {"ok",
// "steps": {name: {ok, ...}}}; tests/clients/test_e2b_snapshots.py checks the details. Every
// sandbox it makes is killed at its end.
import { Sandbox } from '@e2b/code-interpreter';

import { failure, scenario } from './scenario.mjs';

const { step, finish } = scenario('e2b_snapshots.mjs');

const made = [];
const keep = sandbox => { made.push(sandbox); return sandbox; };
const value = async (sandbox, code) => {
  const execution = await sandbox.runCode(code);
  return execution.error ? `error: ${execution.error.name}` : (execution.text ?? null);
};

let source, snapshot, second;
await step('create_snapshot', async () => {
  source = keep(await Sandbox.create({ timeoutMs: 180_000 }));
  await source.runCode("kept = {'a': [1, 2]}");
  await source.files.write('/home/user/note.txt', 'before');
  snapshot = await source.createSnapshot({ name: 'sdk-snap' });
  second = await Sandbox.createSnapshot(source.sandboxId);
  return { snapshot, second, distinct: snapshot.snapshotId !== second.snapshotId };
});

await step('list_snapshots', async () => {
  const ids = list => list.map(s => s.snapshotId);
  const all = await Sandbox.listSnapshots().nextItems();
  const own = await source.listSnapshots().nextItems();
  const byName = await Sandbox.listSnapshots({ name: 'sdk-snap' }).nextItems();
  const other = await Sandbox.listSnapshots({ sandboxId: 'no-such-sandbox' }).nextItems();
  const paginator = Sandbox.listSnapshots({ sandboxId: source.sandboxId, limit: 1 });
  const firstPage = ids(await paginator.nextItems());
  const hadNext = paginator.hasNext;
  const secondPage = ids(await paginator.nextItems());
  return {
    all: ids(all), own: ids(own), by_name: byName, other: ids(other),
    pages: { first: firstPage, had_next: hadNext, second: secondPage, has_next: paginator.hasNext },
  };
});

await step('create_from_snapshot', async () => {
  await source.runCode('kept = None');
  await source.files.write('/home/user/note.txt', 'after');
  const restored = keep(await Sandbox.create(snapshot.snapshotId, { timeoutMs: 120_000 }));
  return {
    distinct: restored.sandboxId !== source.sandboxId,
    kept: await value(restored, 'kept'),
    note: await restored.files.read('/home/user/note.txt'),
    source_kept: await value(source, 'kept'),
    source_note: await source.files.read('/home/user/note.txt'),
    running: await restored.isRunning(),
  };
});

await step('fork', async () => {
  await source.runCode('counter = 10');
  const forks = await source.fork({ count: 2, timeoutMs: 120_000 });
  const sandboxes = forks.filter(f => f instanceof Sandbox).map(keep);
  const [one, two] = sandboxes;
  await one.runCode('counter += 1');
  await one.files.write('/home/user/note.txt', 'from fork one');
  const single = await Sandbox.fork(source.sandboxId, { timeoutMs: 120_000 });
  single.filter(f => f instanceof Sandbox).forEach(keep);
  return {
    count: forks.length,
    all_sandboxes: sandboxes.length === forks.length,
    ids_distinct: new Set([source.sandboxId, ...sandboxes.map(s => s.sandboxId)]).size === 3,
    one: await value(one, 'counter'),
    two: await value(two, 'counter'),
    source: await value(source, 'counter'),
    two_note: await two.files.read('/home/user/note.txt'),
    source_note: await source.files.read('/home/user/note.txt'),
    single: { count: single.length, is_sandbox: single[0] instanceof Sandbox,
              counter: single[0] instanceof Sandbox ? await value(single[0], 'counter') : null },
  };
});

await step('fork_errors', async () => ({
  missing: await failure(() => Sandbox.fork('no-such-sandbox')),
  too_many: await failure(() => source.fork({ count: 17 })),
}));

await step('delete_snapshot', async () => {
  const deleted = await Sandbox.deleteSnapshot(snapshot.snapshotId);
  const again = await Sandbox.deleteSnapshot(snapshot.snapshotId);
  const listed = (await source.listSnapshots().nextItems()).map(s => s.snapshotId);
  const createGone = await failure(() => Sandbox.create(snapshot.snapshotId, { timeoutMs: 30_000 }));
  const secondDeleted = await Sandbox.deleteSnapshot(second.snapshotId);
  return { deleted, again, listed, create_gone: createGone, second_deleted: secondDeleted };
});

// A hibernated sandbox (POST /v1/sandboxes/{id}/hibernate: the SDK has no such call) is paused
// to E2B; a call into it wakes it when its lifecycle says autoResume, Sandbox.connect always.
const hibernate = id => fetch(`${process.env.E2B_API_URL}/v1/sandboxes/${id}/hibernate`, {
  method: 'POST', headers: { Authorization: `token ${process.env.E2B_API_KEY}` },
}).then(r => r.status);
await step('hibernated', async () => {
  const sleeper = keep(await Sandbox.create({ timeoutMs: 120_000,
    lifecycle: { onTimeout: 'pause', autoResume: true } }));
  await sleeper.runCode('asleep = 3');
  const first = await hibernate(sleeper.sandboxId);
  const info = await Sandbox.getInfo(sleeper.sandboxId);
  const woken = await value(sleeper, 'asleep'); // a call into it wakes it
  const second = await hibernate(sleeper.sandboxId);
  const connected = await Sandbox.connect(sleeper.sandboxId);
  return {
    statuses: [first, second], state: info.state, woken,
    after_connect: (await Sandbox.getInfo(sleeper.sandboxId)).state,
    connected_value: await value(connected, 'asleep'),
  };
});

for (const sandbox of made)
  await sandbox.kill().catch(() => {});
finish();
