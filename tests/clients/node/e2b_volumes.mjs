// E2B's `Volume` class and `volumeMounts` against cellboxd, with the official SDK unchanged:
//
//   E2B_API_URL=http://127.0.0.1:8888 E2B_SANDBOX_URL=http://127.0.0.1:8888 \
//   E2B_VOLUME_API_URL=http://127.0.0.1:8888 E2B_API_KEY=<cellbox token> node e2b_volumes.mjs
//
// A volume created, listed, looked up and connected to; two sandboxes mounting it at different
// paths, files written by one read and changed by the other (through files.* and runCode);
// destroy refused while mounted; the volume's files through E2B's volume content API (made,
// written, read, listed, changed, removed, a planted link kept inside); the data still there for
// a third sandbox after the first two are killed; the volume destroyed. Prints one JSON
// summary line, {"ok", "steps": {name: {ok, ...}}}, and exits 0 when every step passed, 1
// otherwise, 2 on a hang (global deadline). tests/clients/test_e2b_volumes.py checks the details.
import { Sandbox } from '@e2b/code-interpreter';
import { Volume, VolumeError } from 'e2b';

import { failure, scenario } from './scenario.mjs';

const { step, finish } = scenario('e2b_volumes.mjs', { requires: ['E2B_VOLUME_API_URL'] });

const NAME = process.env.CELLBOX_VOLUME_NAME || 'sdk-data';

// The error a call throws, as {name, message, isVolumeError}; null if it did not throw.
const volumeFailure = call => failure(call, err => ({ isVolumeError: err instanceof VolumeError }));

let volume, first, second;
await step('create', async () => {
  volume = await Volume.create(NAME);
  return { volume_id: volume.volumeId, name: volume.name, has_token: !!volume.token };
});

await step('list_info_connect', async () => {
  const listed = await Volume.list();
  const info = await Volume.getInfo(volume.volumeId);
  const connected = await Volume.connect(volume.volumeId);
  const missing = await volumeFailure(() => Volume.getInfo('no-such-volume'));
  return {
    listed: listed.map(v => ({ volumeId: v.volumeId, name: v.name })),
    info: { volumeId: info.volumeId, name: info.name },
    connected: { volumeId: connected.volumeId, name: connected.name },
    missing_is_not_found: missing?.name === 'VolumeNotFoundError' && missing !== null,
    duplicate: await volumeFailure(() => Volume.create(NAME)),
  };
});

await step('mount_two', async () => {
  first = await Sandbox.create({ volumeMounts: { '/mnt/data': volume }, timeoutMs: 120_000 });
  second = await Sandbox.create({ volumeMounts: { '/data/shared': NAME }, timeoutMs: 120_000 });
  const info = await Sandbox.getInfo(first.sandboxId);
  return { first_mounts: info.volumeMounts, second_mounts: (await second.getInfo()).volumeMounts };
});

await step('share', async () => {
  await first.files.write('/mnt/data/notes/hello.txt', 'from the first sandbox\n');
  const seen = await second.files.read('/data/shared/notes/hello.txt');
  const appended = await second.runCode(
    "open('/data/shared/notes/hello.txt', 'a').write('and the second\\n')\n" +
    "import os; print(sorted(os.listdir('/data/shared/notes')))");
  const back = await first.files.read('/mnt/data/notes/hello.txt');
  const listed = (await first.files.list('/mnt/data/notes')).map(e => e.name);
  return { seen, appended_stdout: appended.logs.stdout, back, listed };
});

await step('destroy_refused_while_mounted', async () => {
  const refused = await volumeFailure(() => Volume.destroy(volume.volumeId));
  return { refused, still_listed: (await Volume.list()).some(v => v.name === NAME) };
});

await step('content', async () => {
  // files of the volume from outside any sandbox (E2B's volume content API)
  const made = await volume.makeDir('/docs');
  const written = await volume.writeFile('/docs/a.txt', 'hello volume');
  const text = await volume.readFile('/docs/a.txt');
  const fromSandbox = await volume.readFile('/notes/hello.txt');
  const bytes = await volume.readFile('/docs/a.txt', { format: 'bytes' });
  const top = (await volume.list('/')).map(e => e.name).sort();
  const deep = (await volume.list('/', { depth: 2 })).map(e => e.path).sort();
  const info = await volume.getInfo('/docs/a.txt');
  const chmod = await volume.updateMetadata('/docs/a.txt', { mode: 0o600 });
  const seenInSandbox = await second.files.read('/data/shared/docs/a.txt');
  const exists = [await volume.exists('/docs'), await volume.exists('/nope')];
  const missing = await volumeFailure(() => volume.readFile('/nope.txt'));
  const owner = await volumeFailure(() => volume.updateMetadata('/docs/a.txt', { uid: 0 }));
  const again = await volumeFailure(() => volume.makeDir('/docs'));
  // a link planted by a sandbox resolves inside the volume, never on the host
  await first.runCode("import os; os.symlink('/etc/passwd', '/mnt/data/escape')");
  const escape = await volumeFailure(() => volume.readFile('/escape'));
  await volume.remove('/docs');
  const removed = await volume.exists('/docs');
  return {
    made: { name: made.name, type: made.type, path: made.path },
    written: { name: written.name, type: written.type, size: written.size, mode: written.mode },
    text, fromSandbox, byte_length: bytes.length, top, deep,
    info: { type: info.type, size: info.size, mode: info.mode, mtime_is_date: info.mtime instanceof Date },
    chmod_mode: chmod.mode, seenInSandbox, exists,
    missing_is_path_not_found: missing?.name === 'VolumePathNotFoundError',
    owner, again, escape, removed,
  };
});

await step('outlives_sandboxes', async () => {
  await first.kill();
  await second.kill();
  const third = await Sandbox.create({ volumeMounts: { '/srv/again': volume }, timeoutMs: 60_000 });
  const text = await third.files.read('/srv/again/notes/hello.txt');
  await third.kill();
  return { text };
});

await step('destroy', async () => {
  const destroyed = await Volume.destroy(volume.volumeId);
  const again = await Volume.destroy(volume.volumeId);
  const gone = await volumeFailure(() => Volume.getInfo(volume.volumeId));
  const mountMissing = await volumeFailure(() => Sandbox.create({ volumeMounts: { '/mnt/x': NAME }, timeoutMs: 30_000 }));
  return { destroyed, again, gone_is_not_found: gone?.name === 'VolumeNotFoundError', mount_missing: mountMissing };
});

finish();
