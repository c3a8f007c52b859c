// cellboxd's MCP server with the official TypeScript SDK's Client (streamable HTTP to
// $CELLBOX_URL/mcp) running other languages than Python (issue 23): run_code with `language`
// javascript, typescript, bash and r (a value, an error), and create_context with a language whose
// context keeps state between run_code calls. Prints one JSON summary line (scenario.mjs's
// shape: {"ok", "steps"}); tests/clients/test_mcp_languages.py checks each step again.
// CELLBOX_LANGUAGES (comma-separated: javascript, typescript, bash, r) leaves out what the host
// cannot run.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const baseUrl = (process.env.CELLBOX_URL || '').replace(/\/+$/, '');
const token = process.env.CELLBOX_TOKEN || '';
const deadlineMs = Number(process.env.CELLBOX_CLIENT_DEADLINE_MS || 150000);
const wanted = new Set((process.env.CELLBOX_LANGUAGES || 'javascript,typescript,bash,r').split(','));
if (!baseUrl) {
  console.error('usage: CELLBOX_URL=... CELLBOX_TOKEN=... node mcp_languages.mjs');
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

// Every step reports what the tool answered; whether that is right is the Python side's call.
async function step(name, body) {
  try {
    report(name, true, await body());
  } catch (error) {
    report(name, false, { exception: String(error && error.stack || error) });
  }
}

const client = new Client({ name: 'cellbox-language-tests', version: '0.0.0' });
const transport = new StreamableHTTPClientTransport(new URL(baseUrl + '/mcp'), {
  requestInit: { headers: { Authorization: `token ${token}` } }
});
async function call(name, args) {
  const result = await client.callTool({ name, arguments: args });
  return { isError: !!result.isError, text: textOf(result) };
}

await step('connect', async () => {
  await client.connect(transport);
  const { tools } = await client.listTools();
  const byName = Object.fromEntries(tools.map(t => [t.name, t]));
  return {
    run_code_languages: byName.run_code?.inputSchema?.properties?.language?.enum ?? null,
    create_context: byName.create_context
      ? { properties: Object.keys(byName.create_context.inputSchema?.properties || {}) } : null,
  };
});

const CELLS = {
  javascript: { value: "console.log('from js');\n6 * 7", error: "throw new Error('mcp boom')",
                set: 'let kept = 41;', get: 'kept + 1' },
  typescript: { value: 'const six: number = 6;\nsix * 7', error: "throw new TypeError('mcp boom')",
                set: 'let kept: number = 41;', get: 'kept + 1' },
  bash: { value: 'echo from bash; echo $(( 6 * 7 ))', error: 'echo mcp boom >&2; false',
          set: 'kept=41', get: 'echo $((kept + 1))' },
  r: { value: "cat('from r\\n')\n6 * 7", error: "stop('mcp boom')",
       set: 'kept <- 41', get: 'kept + 1' },
};

if (steps.connect?.ok) {
  for (const [language, cells] of Object.entries(CELLS)) {
    if (!wanted.has(language))
      continue;
    await step(`value_${language}`, () => call('run_code', { code: cells.value, language }));
    await step(`error_${language}`, () => call('run_code', { code: cells.error, language }));
    await step(`context_${language}`, async () => {
      const made = await call('create_context', { language });
      const id = (made.text.match(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g) || []).pop();
      const set = await call('run_code', { code: cells.set, context_id: id });
      const got = await call('run_code', { code: cells.get, context_id: id });
      return { made, context_id: id ?? null, set, got };
    });
  }
}
await client.close().catch(() => {});
clearTimeout(hang);
process.stdout.write(JSON.stringify(summary()) + '\n');
process.exit(summary().ok ? 0 : 1);
