// E2B's sandbox.git.* (which runs git through commands.run in the sandbox) and the two ways of
// following a process again, CommandHandle.disconnect() + commands.connect(pid) and
// pty.connect(pid), through E2B's official SDK unchanged, pointed at cellboxd:
//
//   E2B_API_URL=http://127.0.0.1:8888 E2B_SANDBOX_URL=http://127.0.0.1:8888 \
//   E2B_API_KEY=<cellbox token> node e2b_git.mjs
//
// git needs no network here: a bare repository in the sandbox is the remote. Steps: configure
// the user, init, add, commit, status, branches (create, checkout, delete), remoteAdd/remoteGet,
// push to and clone from the bare repository, pull, reset and restore; then a background
// command disconnected and connected again, and a pty connected from a second handle. Prints one
// JSON summary line (scenario.mjs); tests/clients/test_e2b_git.py checks the details.
import { Sandbox } from '@e2b/code-interpreter';

import { scenario } from './scenario.mjs';

const { step, finish } = scenario('e2b_git.mjs');
const repo = '/home/user/repo', bare = '/home/user/remote.git', copy = '/home/user/copy';

let sbx;
await step('create', async () => {
  sbx = await Sandbox.create({ timeoutMs: 120_000 });
  return { ok: !!sbx.sandboxId };
});

if (sbx) {
  await step('config', async () => {
    await sbx.git.configureUser('Ada', 'ada@example.com');
    const name = await sbx.git.getConfig('user.name');
    return { name, ok: name === 'Ada' };
  });

  await step('init_add_commit', async () => {
    await sbx.git.init(repo, { initialBranch: 'main' });
    await sbx.files.write(`${repo}/a.txt`, 'first\n');
    const dirty = await sbx.git.status(repo);
    await sbx.git.add(repo, { all: true });
    await sbx.git.commit(repo, 'first commit');
    const clean = await sbx.git.status(repo);
    const log = await sbx.commands.run(`git -C ${repo} log --format=%s%x09%an`);
    return { dirty_files: dirty.fileStatus.map(f => f.name), clean: clean.isClean,
             branch: clean.currentBranch, log: log.stdout.trim(),
             ok: clean.isClean && log.stdout.trim() === 'first commit\tAda' };
  });

  await step('branches', async () => {
    await sbx.git.createBranch(repo, 'feature');
    const onFeature = await sbx.git.branches(repo);
    await sbx.git.checkoutBranch(repo, 'main');
    await sbx.git.deleteBranch(repo, 'feature');
    const after = await sbx.git.branches(repo);
    return { on_feature: onFeature.currentBranch, branches_then: onFeature.branches,
             branches_after: after.branches, ok: after.branches.join() === 'main' };
  });

  await step('remote_push_clone_pull', async () => {
    await sbx.git.init(bare, { bare: true, initialBranch: 'main' });
    await sbx.git.remoteAdd(repo, 'origin', bare);
    const url = await sbx.git.remoteGet(repo, 'origin');
    await sbx.git.push(repo, { remote: 'origin', branch: 'main' });
    await sbx.git.clone(bare, { path: copy });
    const cloned = await sbx.files.read(`${copy}/a.txt`);
    await sbx.files.write(`${repo}/b.txt`, 'second\n');
    await sbx.git.add(repo, { files: ['b.txt'] });
    await sbx.git.commit(repo, 'second commit');
    await sbx.git.push(repo);
    await sbx.git.pull(copy);
    const pulled = await sbx.files.read(`${copy}/b.txt`);
    return { url, cloned, pulled, ok: url === bare && cloned === 'first\n' && pulled === 'second\n' };
  });

  await step('reset_restore', async () => {
    await sbx.files.write(`${repo}/a.txt`, 'changed\n');
    await sbx.git.restore(repo, { paths: ['a.txt'] });
    const restored = await sbx.files.read(`${repo}/a.txt`);
    await sbx.git.reset(repo, { mode: 'hard', target: 'HEAD~1' });
    const exists = await sbx.files.exists(`${repo}/b.txt`);
    return { restored, b_after_reset: exists, ok: restored === 'first\n' && !exists };
  });

  await step('disconnect_and_connect', async () => {
    const handle = await sbx.commands.run('sleep 1; echo later; exit 3', { background: true });
    await handle.disconnect();
    const again = await sbx.commands.connect(handle.pid);
    let error = null;
    try { await again.wait(); } catch (err) { error = err; }
    return { stdout: error?.stdout ?? again.stdout, exit_code: error?.exitCode ?? again.exitCode,
             ok: error?.name === 'CommandExitError' && error.exitCode === 3 && error.stdout === 'later\n' };
  });

  await step('pty_connect', async () => {
    const first = [];
    const terminal = await sbx.pty.create({ cols: 80, rows: 24, onData: d => first.push(Buffer.from(d)) });
    const seen = [];
    const second = await sbx.pty.connect(terminal.pid, { onData: d => seen.push(Buffer.from(d)) });
    await sbx.pty.sendInput(terminal.pid, new TextEncoder().encode('echo from-$((40+2))\nexit\n'));
    try { await second.wait(); } catch { /* a shell left by `exit` ends 0; either way it ended */ }
    const text = Buffer.concat(seen).toString();
    return { saw_output: text.includes('from-42'), ok: text.includes('from-42') };
  });

  await step('kill', async () => {
    await sbx.kill();
    return { ok: !(await sbx.isRunning()) };
  });
}

finish();
