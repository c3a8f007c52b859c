// make bench's E2B figures (bench/bench.py --only e2b, and a short run in tests/clients/test_e2b_bench.py):
// the E2B SDK's call and /v1's equivalent, timed in this one process on one sandbox, so the
// ratio is the E2B path's cost and not a difference between clients.
//
//   E2B_API_URL=... E2B_SANDBOX_URL=... E2B_API_KEY=<token> CELLBOX_BENCH_RUNS=40 node e2b_bench.mjs
//
//   commands  sandbox.commands.run('true') (envd's process.Process/Start, a Connect stream) vs
//             POST /v1/sandboxes/{id}/commands {"cmd": "true"} read to its exit event.
//   files     sandbox.files.write(path, 10 MiB) (envd's POST /files) vs PUT /v1/sandboxes/{id}/files.
//
// Prints one JSON line {"ok", "runs", "commands": {"sdk_ms": [...], "v1_ms": [...]}, "files":
// {"bytes", "sdk_ms", "v1_ms"}, "error"?}; exits 0, 1 on an error, 2 on a hang (global deadline).
import { Sandbox } from '@e2b/code-interpreter';

import { checkEnvironment } from './scenario.mjs';

const deadlineMs = Number(process.env.CELLBOX_CLIENT_DEADLINE_MS || 300000);
const runs = Math.max(1, Number(process.env.CELLBOX_BENCH_RUNS || 40));
const fileRuns = Math.max(1, Number(process.env.CELLBOX_BENCH_FILE_RUNS || Math.ceil(runs / 4)));
const FILE_BYTES = 10 * 1024 * 1024;
checkEnvironment('e2b_bench.mjs');
const origin = process.env.E2B_API_URL.replace(/\/$/, '');
const auth = { Authorization: `token ${process.env.E2B_API_KEY}` };
const figures = { ok: false, runs };

const hang = setTimeout(() => {
  figures.error = `no completion within ${deadlineMs} ms`;
  process.stdout.write(JSON.stringify(figures) + '\n');
  process.exit(2);
}, deadlineMs);

async function timed(count, body) {
  const samples = [];
  for (let i = 0; i < count; i++) {
    const started = performance.now();
    await body(i);
    samples.push(performance.now() - started);
  }
  return samples;
}

// /v1's command route: the NDJSON stream ends with {"type": "exit", ...}.
async function v1CommandTrue(sandboxId) {
  const response = await fetch(`${origin}/v1/sandboxes/${sandboxId}/commands`, {
    method: 'POST', headers: { ...auth, 'Content-Type': 'application/json' }, body: JSON.stringify({ cmd: 'true' }),
  });
  const text = await response.text();
  const last = JSON.parse(text.trim().split('\n').pop());
  if (response.status !== 200 || last.type !== 'exit' || last.exit_code !== 0) {
    throw new Error(`/v1 command: ${response.status} ${text.slice(0, 300)}`);
  }
}

async function v1WriteFile(sandboxId, path, data) {
  const response = await fetch(`${origin}/v1/sandboxes/${sandboxId}/files?path=${encodeURIComponent(path)}`, {
    method: 'PUT', headers: { ...auth, 'Content-Type': 'application/octet-stream' }, body: data,
  });
  const entry = await response.json();
  if (!response.ok || entry.size !== data.length) {
    throw new Error(`/v1 file write: ${response.status} ${JSON.stringify(entry).slice(0, 300)}`);
  }
}

async function commandFigures(sandbox) {
  await sandbox.commands.run('true');                          // warm-up
  await v1CommandTrue(sandbox.sandboxId);
  const sdk = await timed(runs, async () => {
    const result = await sandbox.commands.run('true');
    if (result.exitCode !== 0) throw new Error(`commands.run('true') exited ${result.exitCode}`);
  });
  const v1 = await timed(runs, () => v1CommandTrue(sandbox.sandboxId));
  return { sdk_ms: sdk, v1_ms: v1 };
}

async function fileFigures(sandbox) {
  const data = Buffer.alloc(FILE_BYTES, 0x61);
  await sandbox.files.write('bench-e2b.bin', data);           // warm-up
  await v1WriteFile(sandbox.sandboxId, 'bench-v1.bin', data);
  const sdk = await timed(fileRuns, async () => {
    const info = await sandbox.files.write('bench-e2b.bin', data);
    if (!info?.path) throw new Error(`files.write answered ${JSON.stringify(info)}`);
  });
  const v1 = await timed(fileRuns, () => v1WriteFile(sandbox.sandboxId, 'bench-v1.bin', data));
  const size = (await sandbox.files.getInfo('bench-e2b.bin')).size;
  if (size !== FILE_BYTES) throw new Error(`the SDK's file is ${size} bytes, not ${FILE_BYTES}`);
  return { bytes: FILE_BYTES, sdk_ms: sdk, v1_ms: v1 };
}

let sandbox;
try {
  sandbox = await Sandbox.create({ timeoutMs: deadlineMs });
  figures.commands = await commandFigures(sandbox);
  figures.files = await fileFigures(sandbox);
  figures.ok = true;
} catch (err) {
  figures.error = `${err?.name}: ${err?.message}`;
} finally {
  if (sandbox) await sandbox.kill().catch(() => {});
}
clearTimeout(hang);
process.stdout.write(JSON.stringify(figures) + '\n');
process.exit(figures.ok ? 0 : 1);
