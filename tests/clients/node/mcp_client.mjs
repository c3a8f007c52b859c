// Drives cellboxd's MCP server with the official TypeScript SDK's Client, over either transport:
//
//   CELLBOX_URL=http://127.0.0.1:8888 CELLBOX_TOKEN=... node mcp_client.mjs http
//       StreamableHTTPClientTransport to $CELLBOX_URL/mcp, the token in an Authorization header
//   CELLBOX_URL=... CELLBOX_TOKEN=... CELLBOX_CLI=.../cellbox node mcp_client.mjs stdio
//       StdioClientTransport running `cellbox mcp` (the CLI's stdio bridge to /mcp)
//
// Lists the tools, then runs a scenario an agent would: state kept between run_code calls, a
// chart as an image, an error with its traceback, a shell command, files written, read and
// listed, a second sandbox created, used, paused, resumed and deleted, a one-shot run, and an
// unknown tool. Prints one JSON summary line, {"transport", "ok", "steps": {name: {ok, ...}}},
// and exits 0 when every step passed, 1 otherwise, 2 on a hang (global deadline). The pytest
// side (tests/clients/test_mcp.py) checks each step's details again.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const transportName = process.argv[2];
const baseUrl = (process.env.CELLBOX_URL || '').replace(/\/+$/, '');
const token = process.env.CELLBOX_TOKEN || '';
const cli = process.env.CELLBOX_CLI || 'build/bin/cellbox';
const deadlineMs = Number(process.env.CELLBOX_CLIENT_DEADLINE_MS || 150000);
if (!baseUrl || !['http', 'stdio'].includes(transportName)) {
  console.error('usage: CELLBOX_URL=... CELLBOX_TOKEN=... node mcp_client.mjs http|stdio');
  process.exit(64);
}

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
const steps = {};
let bridgeStderr = '';

function report(step, ok, detail) {
  steps[step] = { ok: !!ok, ...(detail || {}) };
  process.stderr.write(`${ok ? 'ok  ' : 'FAIL'} ${step}\n`);
}

function summary() {
  const ok = Object.values(steps).every(s => s.ok);
  return { transport: transportName, ok, steps, bridge_stderr: bridgeStderr.slice(-4000) };
}

const hang = setTimeout(() => {
  report('deadline', false, { message: `no completion within ${deadlineMs} ms` });
  process.stdout.write(JSON.stringify(summary()) + '\n');
  process.exit(2);
}, deadlineMs);

function makeTransport() {
  if (transportName === 'http') {
    return new StreamableHTTPClientTransport(new URL(baseUrl + '/mcp'), {
      requestInit: { headers: { Authorization: `token ${token}` } }
    });
  }
  const transport = new StdioClientTransport({
    command: cli,
    args: ['mcp'],
    env: { CELLBOX_URL: baseUrl, CELLBOX_TOKEN: token },
    stderr: 'pipe'
  });
  transport.stderr.on('data', chunk => { bridgeStderr += chunk.toString(); });
  return transport;
}

const textOf = result => (result.content || []).filter(c => c.type === 'text').map(c => c.text).join('\n');
const imagesOf = result => (result.content || []).filter(c => c.type === 'image');

async function call(client, name, args) {
  const result = await client.callTool({ name, arguments: args || {} });
  return { isError: !!result.isError, text: textOf(result), images: imagesOf(result), result };
}

async function step(name, body) {
  try {
    await body();
  } catch (error) {
    report(name, false, { exception: String(error && error.stack || error) });
  }
}

async function main() {
  const transport = makeTransport();
  const client = new Client({ name: 'cellbox-tests', version: '0.0.0' });

  await step('connect', async () => {
    await client.connect(transport);
    const server = client.getServerVersion();
    report('connect', server && server.name === 'cellbox', {
      server,
      instructions: client.getInstructions() || null,
      capabilities: client.getServerCapabilities() || null,
      session_id: transport.sessionId || null
    });
  });
  if (!steps.connect.ok)
    return finish(client, transport);

  await step('ping', async () => {
    report('ping', typeof (await client.ping()) === 'object');
  });

  await step('tools', async () => {
    const { tools } = await client.listTools();
    const incomplete = tools.filter(t => !t.description || !t.inputSchema || t.inputSchema.type !== 'object')
      .map(t => t.name);
    report('tools', tools.length > 0 && incomplete.length === 0, {
      names: tools.map(t => t.name), incomplete,
      required: Object.fromEntries(tools.map(t => [t.name, t.inputSchema.required || []]))
    });
  });

  await step('state', async () => {
    const first = await call(client, 'run_code', { code: 'x = 1+2' });
    const second = await call(client, 'run_code', { code: 'print(x)' });
    report('state', !first.isError && !second.isError && /\b3\b/.test(second.text), {
      first: first.text, second: second.text
    });
  });

  await step('plot', async () => {
    const code = 'import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title("mcp")\nplt.show()';
    const r = await call(client, 'run_code', { code });
    const image = r.images[0];
    const bytes = image ? Buffer.from(image.data, 'base64') : Buffer.alloc(0);
    report('plot', !r.isError && image && image.mimeType === 'image/png' &&
      bytes.subarray(0, 8).equals(PNG_SIGNATURE), {
      text: r.text, images: r.images.length, mimeType: image ? image.mimeType : null,
      png_signature: bytes.subarray(0, 8).equals(PNG_SIGNATURE), png_bytes: bytes.length
    });
  });

  await step('error', async () => {
    const r = await call(client, 'run_code', { code: 'def f():\n    return 1/0\nf()' });
    report('error', r.isError && r.text.includes('ZeroDivisionError') && r.text.includes('Traceback'), {
      isError: r.isError, text: r.text
    });
  });

  await step('run_command', async () => {
    const passed = await call(client, 'run_command', { cmd: 'echo hello; pwd' });
    const failed = await call(client, 'run_command', { cmd: 'echo oops >&2; exit 3' });
    report('run_command', !passed.isError && passed.text.includes('hello') && failed.isError &&
      failed.text.includes('exit code: 3') && failed.text.includes('oops'), {
      passed: passed.text, passed_isError: passed.isError, failed: failed.text,
      failed_isError: failed.isError
    });
  });

  await step('files', async () => {
    const content = 'hello from mcp\nline two ✓\n';
    const write = await call(client, 'write_file', { path: 'notes/hello.txt', content });
    const read = await call(client, 'read_file', { path: 'notes/hello.txt' });
    const list = await call(client, 'list_files', { path: '/workspace/notes' });
    const fromKernel = await call(client, 'run_code', { code: 'print(open("/workspace/notes/hello.txt").read(), end="")' });
    const missing = await call(client, 'read_file', { path: 'notes/missing.txt' });
    report('files', !write.isError && read.text === content && list.text.includes('hello.txt') &&
      fromKernel.text.includes('line two ✓') && missing.isError, {
      write: write.text, read: read.text, list: list.text, from_kernel: fromKernel.text,
      missing: missing.text, missing_isError: missing.isError
    });
  });

  await step('sandboxes', async () => {
    const created = await call(client, 'create_sandbox', { metadata: { purpose: 'mcp-test' } });
    const id = (created.text.match(/sandbox (\S+)/) || [])[1];
    const set = await call(client, 'run_code', { code: 'y = 40 + 2', sandbox_id: id });
    const got = await call(client, 'run_code', { code: 'print(y)', sandbox_id: id });
    const isolated = await call(client, 'run_code', { code: 'print("y" in globals())' });
    const paused = await call(client, 'pause_sandbox', { sandbox_id: id });
    const listed = await call(client, 'list_sandboxes', {});
    const resumed = await call(client, 'resume_sandbox', { sandbox_id: id });
    const after = await call(client, 'run_code', { code: 'print(y + 1)', sandbox_id: id });
    const deleted = await call(client, 'delete_sandbox', { sandbox_id: id });
    const gone = await call(client, 'run_code', { code: 'print(y)', sandbox_id: id });
    const pausedLine = listed.text.split('\n').find(l => id && l.startsWith(id)) || '';
    report('sandboxes', !!id && !created.isError && !set.isError && got.text.includes('42') &&
      isolated.text.includes('False') && !paused.isError && pausedLine.includes('paused') &&
      !resumed.isError && after.text.includes('43') && !deleted.isError && gone.isError, {
      id: id || null, created: created.text, got: got.text, isolated: isolated.text,
      paused: paused.text, listed: listed.text, resumed: resumed.text, after: after.text,
      deleted: deleted.text, gone: gone.text, gone_isError: gone.isError
    });
  });

  await step('run', async () => {
    const py = await call(client, 'run', { code: 'import sys\nprint("once", sys.version_info[0])' });
    const sh = await call(client, 'run', { code: 'echo shell; exit 4', language: 'bash' });
    const fresh = await call(client, 'run', { code: 'print("x" in globals())' });
    report('run', !py.isError && py.text.includes('exit code: 0') && py.text.includes('once 3') &&
      sh.isError && sh.text.includes('exit code: 4') && sh.text.includes('shell') &&
      fresh.text.includes('False'), {
      python: py.text, bash: sh.text, bash_isError: sh.isError, fresh: fresh.text
    });
  });

  await step('unknown_tool', async () => {
    try {
      const r = await client.callTool({ name: 'no_such_tool', arguments: {} });
      report('unknown_tool', false, { message: 'answered with a result', result: r });
    } catch (error) {
      report('unknown_tool', error.code === -32602 && /no_such_tool/.test(error.message), {
        code: error.code ?? null, message: String(error.message)
      });
    }
  });

  return finish(client, transport);
}

async function finish(client, transport) {
  await step('close', async () => {
    if (transportName === 'http' && transport.sessionId)
      await transport.terminateSession(); // DELETE /mcp: the session's own sandbox goes with it
    await client.close(); // stdio: stdin closed, `cellbox mcp` ends the session and exits
    report('close', true);
  });
}

main()
  .catch(error => report('main', false, { exception: String(error && error.stack || error) }))
  .finally(() => {
    clearTimeout(hang);
    const result = summary();
    process.stdout.write(JSON.stringify(result) + '\n');
    process.exitCode = result.ok ? 0 : 1;
  });
