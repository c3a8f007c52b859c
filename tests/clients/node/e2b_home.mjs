// E2B's layout, users, lifecycle, pagination, metrics, per-run envs and cloud-only calls, driven
// through E2B's official SDK (@e2b/code-interpreter, which wraps `e2b`) pointed at cellboxd:
//
//   E2B_API_URL=http://127.0.0.1:8888 E2B_SANDBOX_URL=http://127.0.0.1:8888 \
//   E2B_API_KEY=<cellbox token> node e2b_home.mjs
//
// Steps: files written to /home/user and to a relative path and read back by runCode at the
// same path; runCode's and a new context's working directory and HOME; writes as user 'root';
// an unknown user's error; pause at the timeout then a call that resumes it (autoResume), and
// a paused sandbox without autoResume; Sandbox.list over several pages; getMetrics; runCode's
// envs; every cloud-only call's error. Prints one JSON summary line, {"ok", "steps": {name:
// {ok, ...}}}, and exits 0 when every step passed, 1 otherwise, 2 on a hang (global deadline).
// tests/clients/test_e2b_home.py checks each step's details again.
import { Sandbox } from '@e2b/code-interpreter';
import { Sandbox as BaseSandbox, Secret, Template } from 'e2b';

import { failure, scenario, sleep } from './scenario.mjs';

const { step, finish } = scenario('e2b_home.mjs');


const created = []; // every sandbox made here, killed at the end

async function create(opts) {
  const sandbox = await Sandbox.create({ timeoutMs: 120_000, ...opts });
  created.push(sandbox);
  return sandbox;
}


// Polls getInfo until the sandbox is in `state` (at most 60 tries, 0.5 s apart).
async function waitForState(sandboxId, state) {
  for (let i = 0; i < 60; i++) {
    if ((await Sandbox.getInfo(sandboxId)).state === state)
      return true;
    await sleep(500);
  }
  return false;
}

let sandbox;
await step('create', async () => {
  sandbox = await create({ metadata: { purpose: 'cellbox-e2b-home' } });
  return { sandbox_id: sandbox.sandboxId, ok: !!sandbox.sandboxId };
});

if (sandbox) {
  await step('home_files', async () => {
    const absolute = await sandbox.files.write('/home/user/upload.txt', 'uploaded to home');
    const relative = await sandbox.files.write('notes/relative.txt', 'relative to home');
    const read = await sandbox.runCode(
      "import json\n" +
      "print(json.dumps([open('/home/user/upload.txt').read(), open('notes/relative.txt').read(),\n" +
      "                  open('/workspace/upload.txt').read()]))");
    const listed = (await sandbox.files.list('notes')).map(e => e.path);
    return { absolute_path: absolute.path, relative_path: relative.path, listed,
             read_back: JSON.parse(read.logs.stdout.join('')),
             relative_read: await sandbox.files.read('notes/relative.txt'),
             ok: !read.error };
  });

  await step('cwd', async () => {
    const here = await sandbox.runCode("import os\nprint(os.getcwd(), os.environ['HOME'])");
    const context = await sandbox.createCodeContext();
    const there = await sandbox.runCode('import os\nprint(os.getcwd())', { context });
    const elsewhere = await sandbox.createCodeContext({ cwd: '/tmp' });
    const tmp = await sandbox.runCode('import os\nprint(os.getcwd())', { context: elsewhere });
    return { default: here.logs.stdout.join('').trim(), context_cwd: context.cwd,
             context: there.logs.stdout.join('').trim(), asked: tmp.logs.stdout.join('').trim() };
  });

  await step('root', async () => {
    const written = await sandbox.files.write('/home/user/by-root.txt', 'root was here', { user: 'root' });
    const relative = await sandbox.files.write('root-relative.txt', 'root relative', { user: 'root' });
    const text = await sandbox.files.read('/home/user/by-root.txt', { user: 'root' });
    const info = await sandbox.files.getInfo('/home/user/by-root.txt', { user: 'root' });
    const exists = await sandbox.files.exists('/home/user/by-root.txt', { user: 'root' });
    const tmp = await sandbox.files.write('/tmp/by-root.txt', 'tmp', { user: 'root' });
    const etc = await failure(() => sandbox.files.write('/etc/cellbox-root-test', 'x', { user: 'root' }));
    const usr = await failure(() => sandbox.files.makeDir('/usr/cellbox-root-test', { user: 'root' }));
    const seen = await sandbox.runCode("print(open('/home/user/by-root.txt').read())");
    return { path: written.path, relative_path: relative.path, text, owner: info.owner,
             exists, tmp_path: tmp.path, etc, usr, seen: seen.logs.stdout.join('') };
  });

  await step('unknown_user', async () => {
    const write = await failure(() => sandbox.files.write('x.txt', 'x', { user: 'alice' }));
    const read = await failure(() => sandbox.files.read('/home/user/upload.txt', { user: 'alice' }));
    const list = await failure(() => sandbox.files.list('/home/user', { user: 'alice' }));
    const created_file = await sandbox.files.exists('x.txt');
    return { write, read, list, created_file };
  });

  await step('envs', async () => {
    const code = "import os\nos.environ.get('CELLBOX_RUN_ENV')";
    const inside = await sandbox.runCode(code, { envs: { CELLBOX_RUN_ENV: 'only this run' } });
    const after = await sandbox.runCode(code);
    const home = await sandbox.runCode("import os\nos.environ['HOME']", { envs: { HOME: '/tmp' } });
    const home_after = await sandbox.runCode("import os\nos.environ['HOME']");
    return { inside: inside.text ?? null, after: after.text ?? null, home: home.text ?? null,
             home_after: home_after.text ?? null };
  });

  await step('metrics', async () => {
    await sandbox.runCode('total = sum(i * i for i in range(3_000_000))\nblob = bytearray(32 << 20)');
    await sandbox.files.write('/home/user/ballast.bin', new Uint8Array(1 << 20).fill(7));
    const metrics = await sandbox.getMetrics();
    const m = metrics[0] || {};
    return { count: metrics.length, cpuCount: m.cpuCount, cpuUsedPct: m.cpuUsedPct,
             memUsed: m.memUsed, memTotal: m.memTotal, diskUsed: m.diskUsed,
             diskTotal: m.diskTotal, timestamp: m.timestamp?.toISOString?.() ?? null,
             ok: metrics.length === 1 };
  });
}

await step('pagination', async () => {
  const group = `page-${process.pid}-${Date.now()}`;
  const made = [];
  for (let i = 0; i < 3; i++)
    made.push((await create({ metadata: { group } })).sandboxId);
  const paginator = Sandbox.list({ query: { metadata: { group } }, limit: 2 });
  const pages = [];
  const tokens = [];
  while (paginator.hasNext && pages.length < 5) {
    pages.push((await paginator.nextItems()).map(s => s.sandboxId));
    tokens.push(paginator.nextToken ?? null);
  }
  // the first page's token again: the same second page
  const again = Sandbox.list({ query: { metadata: { group } }, limit: 2, nextToken: tokens[0] });
  const second = (await again.nextItems()).map(s => s.sandboxId);
  const all = Sandbox.list({ query: { metadata: { group } } });
  const whole = (await all.nextItems()).map(s => s.sandboxId);
  return { made, pages, tokens, second, whole, has_next_after_all: all.hasNext };
});

await step('pause_on_timeout', async () => {
  const paused = await create({ timeoutMs: 4_000, lifecycle: { onTimeout: 'pause', autoResume: true } });
  const info = await Sandbox.getInfo(paused.sandboxId);
  await paused.runCode('kept = 41');
  const reached = await waitForState(paused.sandboxId, 'paused');
  const listed = (await Sandbox.list({ query: { state: ['paused'] } }).nextItems()).map(s => s.sandboxId);
  await paused.setTimeout(120_000).catch(() => {}); // a control-plane call does not resume it
  const still = (await Sandbox.getInfo(paused.sandboxId)).state;
  const resumed = await paused.runCode('kept + 1'); // traffic resumes it
  const after = (await Sandbox.getInfo(paused.sandboxId)).state;
  const file = await paused.files.write('after-resume.txt', 'yes');
  return { lifecycle: info.lifecycle, reached_paused: reached,
           listed_paused: listed.includes(paused.sandboxId), state_before_call: still,
           text: resumed.text ?? null, state_after: after, file_path: file.path };
});

await step('pause_without_resume', async () => {
  const paused = await create({ timeoutMs: 4_000, lifecycle: { onTimeout: 'pause' } });
  const info = await Sandbox.getInfo(paused.sandboxId);
  const reached = await waitForState(paused.sandboxId, 'paused');
  const running = await paused.isRunning();
  const run = await failure(() => paused.runCode('1'));
  const files = await failure(() => paused.files.read('/home/user/anything'));
  await paused.connect({ timeoutMs: 120_000 });
  const after = await paused.runCode('1 + 1');
  return { lifecycle: info.lifecycle, reached_paused: reached, running, run, files,
           text_after_connect: after.text ?? null };
});

await step('cloud_only', async () => {
  const id = sandbox?.sandboxId ?? 'none';
  const calls = {
    'Sandbox.updateNetwork': () => Sandbox.updateNetwork(id, { rules: { 'api.example.com': [{ transform: { headers: { A: 'b' } } }] } }),
    'Sandbox.create({mcp})': () => BaseSandbox.create({ mcp: { exa: { apiKey: 'x' } }, timeoutMs: 10_000 }),
    'Secret.create': () => Secret.create('cellbox-test', 'value'),
    'Secret.update': () => Secret.update('cellbox-test', 'value'),
    'Secret.getInfo': () => Secret.getInfo('cellbox-test'),
    'Secret.list': () => Secret.list().nextItems(),
    'Secret.exists': () => Secret.exists('cellbox-test'),
    'Secret.destroy': () => Secret.destroy('cellbox-test'),
    'Template.build': () => Template.build(Template().fromImage('debian:bookworm'), 'cellbox-test'),
    'Template.getTags': () => Template.getTags('cellbox-test'),
    'Template.assignTags': () => Template.assignTags('cellbox-test', ['v1']),
    'Template.removeTags': () => Template.removeTags('cellbox-test', ['v1']),
  };
  const errors = {};
  for (const [name, call] of Object.entries(calls))
    errors[name] = await failure(call);
  return { errors };
});

for (const made of created)
  await made.kill().catch(() => {});

finish();
