// File metadata (envd 0.6.2) and the envd 0.6.x features through E2B's official SDK (`e2b`),
// unchanged, pointed at cellboxd by the environment alone (E2B_API_URL, E2B_SANDBOX_URL,
// E2B_API_KEY):
//
//   the envd version the sandbox reports; files.write with {metadata} as a form and as a stream,
//   the answer, getInfo and list showing it; an overwrite replacing it (and one without metadata
//   clearing it); a file written without metadata (no map); several files of one form sharing
//   it; metadata past the server's limits (InvalidArgumentError naming the limit, no file left);
//   watchDir with includeEntry and allowNetworkMounts, whose event entry carries the metadata.
//
// Prints one JSON summary line, {"ok", "steps": {name: {ok, ...}}}, and exits 0 when every
// step passed, 1 otherwise, 2 on a hang (global deadline). tests/clients/test_e2b_metadata.py
// checks each step's details again.
import { Sandbox } from 'e2b';

import { failure, scenario } from './scenario.mjs';

const { step, finish } = scenario('e2b_metadata.mjs', { deadlineMs: 100000 });


const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

// The metadata of `path` as getInfo and list (of its directory) give it.
async function seen(sandbox, path) {
  const info = await sandbox.files.getInfo(path);
  const directory = path.slice(0, path.lastIndexOf('/'));
  const listed = (await sandbox.files.list(directory)).find(e => e.path === info.path);
  return { info: info.metadata ?? null, listed: listed?.metadata ?? null };
}

let sandbox;
await step('create', async () => {
  sandbox = await Sandbox.create({ timeoutMs: 120_000 });
  const info = await sandbox.getInfo();
  return { envd_version: info.envdVersion, ok: info.envdVersion === '0.6.4' };
});

if (sandbox) {
  const tags = { author: 'ann', purpose: 'quarterly report' };

  await step('write_form', async () => {
    const written = await sandbox.files.write('meta/report.txt', 'hello', { metadata: tags });
    const now = await seen(sandbox, 'meta/report.txt');
    return { written: written.metadata ?? null, ...now,
             ok: same(written.metadata, tags) && same(now.info, tags) && same(now.listed, tags) };
  });

  await step('write_stream', async () => {
    const written = await sandbox.files.write('meta/stream.txt', 'streamed',
                                              { metadata: { source: 'stream' }, useOctetStream: true });
    const now = await seen(sandbox, 'meta/stream.txt');
    const content = await sandbox.files.read('meta/stream.txt');
    return { written: written.metadata ?? null, ...now, content,
             ok: same(written.metadata, { source: 'stream' }) && same(now.info, { source: 'stream' }) &&
                 content === 'streamed' };
  });

  await step('overwrite', async () => {
    // keys arrive as header names, which have no case: envd keeps them in lower case
    const replaced = await sandbox.files.write('meta/report.txt', 'again', { metadata: { Author: 'bob' } });
    const afterReplace = await seen(sandbox, 'meta/report.txt');
    const cleared = await sandbox.files.write('meta/report.txt', 'plain');
    const afterClear = await seen(sandbox, 'meta/report.txt');
    return { replaced: replaced.metadata ?? null, after_replace: afterReplace,
             cleared: cleared.metadata ?? null, after_clear: afterClear,
             ok: same(afterReplace.info, { author: 'bob' }) && afterClear.info === null &&
                 afterClear.listed === null };
  });

  await step('without_metadata', async () => {
    const written = await sandbox.files.write('meta/plain.txt', 'no tags');
    const now = await seen(sandbox, 'meta/plain.txt');
    return { written_has_key: 'metadata' in written && written.metadata !== undefined, ...now,
             ok: written.metadata === undefined && now.info === null && now.listed === null };
  });

  await step('several_files', async () => {
    const written = await sandbox.files.write([
      { path: 'meta/many/a.txt', data: 'a' },
      { path: 'meta/many/b.txt', data: 'b' },
    ], { metadata: { batch: '7' } });
    const a = await seen(sandbox, 'meta/many/a.txt');
    const b = await seen(sandbox, 'meta/many/b.txt');
    return { written: written.map(w => w.metadata ?? null), a, b,
             ok: same(a.info, { batch: '7' }) && same(b.listed, { batch: '7' }) };
  });

  await step('limits', async () => {
    const longKey = await failure(() => sandbox.files.write('meta/long-key.txt', 'x', { metadata: { ['k'.repeat(247)]: 'v' } }));
    const big = {};
    for (let i = 0; i < 5; i++) big[`key${i}`] = 'v'.repeat(1000);
    const tooMuch = await failure(() => sandbox.files.write('meta/too-much.txt', 'x', { metadata: big }));
    const left = [await sandbox.files.exists('meta/long-key.txt'), await sandbox.files.exists('meta/too-much.txt')];
    const longest = await sandbox.files.write('meta/longest-key.txt', 'x', { metadata: { ['k'.repeat(246)]: 'v' } });
    return { long_key: longKey, too_much: tooMuch, left,
             longest_key_length: Object.keys(longest.metadata ?? {})[0]?.length ?? 0,
             ok: longKey?.name === 'InvalidArgumentError' && tooMuch?.name === 'InvalidArgumentError' &&
                 !left[0] && !left[1] };
  });

  await step('watch_include_entry', async () => {
    await sandbox.files.write('meta/w/before.txt', 'x', { metadata: { watched: 'yes' } });
    const events = [];
    let seenMoved;
    const moved = new Promise(resolve => { seenMoved = resolve; });
    const handle = await sandbox.files.watchDir('meta/w', event => {
      events.push({ name: event.name, type: event.type, metadata: event.entry?.metadata ?? null });
      if (event.name === 'after.txt' && event.entry) seenMoved();
    }, { includeEntry: true, allowNetworkMounts: true, timeoutMs: 30_000 });
    await sandbox.files.rename('meta/w/before.txt', 'meta/w/after.txt');
    // bounded: the step fails (rather than hangs) when no event names the moved file
    const arrived = await Promise.race([moved.then(() => true),
                                       new Promise(resolve => setTimeout(() => resolve(false), 20_000))]);
    await handle.stop();
    const entry = events.find(e => e.name === 'after.txt' && e.metadata);
    return { events, arrived, ok: arrived && same(entry?.metadata, { watched: 'yes' }) };
  });

  await step('kill', async () => ({ ok: (await sandbox.kill()) === true }));
}

finish();
