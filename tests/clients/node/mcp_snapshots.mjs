// cellboxd's MCP server with the official TypeScript SDK's Client (streamable HTTP to
// $CELLBOX_URL/mcp) using the snapshot tools (issue 24): snapshot_sandbox, run_code_in_fork ("try
// a risky cell in a fork"), fork_sandbox with a count, restore_snapshot as a new sandbox and in
// place, and their refusals. Prints one JSON summary line (scenario.mjs's shape: {"ok",
// "steps"}); tests/clients/test_mcp_snapshots.py checks each step's answers. Every sandbox the
// script makes is deleted at its end (the session's own goes with the session).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const baseUrl = (process.env.CELLBOX_URL || '').replace(/\/+$/, '');
const token = process.env.CELLBOX_TOKEN || '';
const deadlineMs = Number(process.env.CELLBOX_CLIENT_DEADLINE_MS || 150000);
if (!baseUrl) {
  console.error('usage: CELLBOX_URL=... CELLBOX_TOKEN=... node mcp_snapshots.mjs');
  process.exit(64);
}

const steps = {};
const report = (name, ok, detail) => {
  steps[name] = { ok: !!ok, ...(detail || {}) };
  process.stderr.write(`${ok ? 'ok  ' : 'FAIL'} ${name}\n`);
};
const summary = () => ({ ok: Object.values(steps).every(s => s.ok), steps });
const hang = setTimeout(() => {
  report('deadline', false, { message: `no completion within ${deadlineMs} ms` });
  process.stdout.write(JSON.stringify(summary()) + '\n');
  process.exit(2);
}, deadlineMs);

const textOf = result => (result.content || []).filter(c => c.type === 'text').map(c => c.text).join('\n');
const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g;

// Every step reports what the tools answered; whether that is right is the Python side's call.
async function step(name, body) {
  try {
    report(name, true, await body());
  } catch (error) {
    report(name, false, { exception: String(error && error.stack || error) });
  }
}

const client = new Client({ name: 'cellbox-snapshot-tests', version: '0.0.0' });
const transport = new StreamableHTTPClientTransport(new URL(baseUrl + '/mcp'), {
  requestInit: { headers: { Authorization: `token ${token}` } }
});
async function call(name, args) {
  const result = await client.callTool({ name, arguments: args });
  return { isError: !!result.isError, text: textOf(result) };
}
const made = new Set(); // sandboxes this script made: deleted at the end

await step('connect', async () => {
  await client.connect(transport);
  const { tools } = await client.listTools();
  const byName = Object.fromEntries(tools.map(t => [t.name, t]));
  const wanted = ['snapshot_sandbox', 'restore_snapshot', 'fork_sandbox', 'run_code_in_fork'];
  return Object.fromEntries(wanted.map(name => [name, byName[name]
    ? { properties: Object.keys(byName[name].inputSchema?.properties || {}),
        required: byName[name].inputSchema?.required || [] } : null]));
});

let snapshotId = null, source = null;
if (steps.connect?.ok) {
  await step('setup', async () => {
    const set = await call('run_code', { code: 'x = 5\nimport os\nsource_pid = os.getpid()' });
    const listed = await call('list_sandboxes', {});
    source = (listed.text.match(UUID) || [])[0] ?? null;
    return { set, source };
  });
  await step('snapshot', async () => {
    const taken = await call('snapshot_sandbox', { name: 'mcp-snap' });
    snapshotId = (taken.text.match(/snapshot (\S+) of sandbox/) || [])[1] ?? null;
    return { taken, snapshot_id: snapshotId };
  });
  await step('run_code_in_fork', async () => {
    const tried = await call('run_code_in_fork', { code: 'x = 100\nprint(x)' });
    const fork = (tried.text.match(/ran in fork (\S+)/) || [])[1] ?? null;
    if (fork) made.add(fork);
    const original = await call('run_code', { code: 'print(x)' });
    const inFork = fork ? await call('run_code', { code: 'print(x)', sandbox_id: fork }) : null;
    return { tried, fork, original, in_fork: inFork };
  });
  await step('fork_sandbox', async () => {
    const forked = await call('fork_sandbox', { count: 2 });
    const ids = (forked.text.match(UUID) || []).filter(id => id !== source);
    ids.forEach(id => made.add(id));
    const changed = ids[0] ? await call('run_code', { code: 'x = 7\nprint(x)', sandbox_id: ids[0] }) : null;
    const other = ids[1] ? await call('run_code', { code: 'print(x)', sandbox_id: ids[1] }) : null;
    const original = await call('run_code', { code: 'print(x)' });
    return { forked, ids, changed, other, original };
  });
  await step('restore_new', async () => {
    await call('run_code', { code: 'x = 0' });
    const restored = await call('restore_snapshot', { snapshot_id: snapshotId });
    const id = (restored.text.match(/sandbox (\S+) is snapshot/) || [])[1] ?? null;
    if (id) made.add(id);
    const value = id ? await call('run_code', { code: 'print(x)', sandbox_id: id }) : null;
    const original = await call('run_code', { code: 'print(x)' });
    return { restored, id, value, original };
  });
  await step('restore_in_place', async () => {
    const restored = await call('restore_snapshot', { snapshot_id: snapshotId, in_place: true });
    const id = (restored.text.match(/sandbox (\S+) is snapshot/) || [])[1] ?? null;
    const value = await call('run_code', { code: 'print(x)' });
    return { restored, id, value };
  });
  await step('refusals', async () => ({
    unknown_snapshot: await call('restore_snapshot', { snapshot_id: 'no-such-snapshot' }),
    too_many: await call('fork_sandbox', { count: 17 }),
    no_code: await call('run_code_in_fork', {}),
  }));
  for (const id of made)
    await call('delete_sandbox', { sandbox_id: id }).catch(() => {});
}
await client.close().catch(() => {});
clearTimeout(hang);
process.stdout.write(JSON.stringify(summary()) + '\n');
process.exit(summary().ok ? 0 : 1);
