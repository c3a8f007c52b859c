// A template named through each client library a user already has, unchanged, against cellboxd
// (environment as for e2b_client.mjs, plus CELLBOX_TEMPLATE: the template's name, and
// CELLBOX_MODULE: a module its sandboxes have and python3's do not have imported):
//
//   E2B's SDK (e2b, @e2b/code-interpreter): Template.exists(name) and the older aliasExists are
//     true, false for a name no template has; Sandbox.create(name) makes a sandbox of it, and
//     runCode imports the module there;
//   MCP's SDK (@modelcontextprotocol/sdk, streamable HTTP to /mcp): the tools' descriptions say
//     how a template is built; list_templates names it with its kind and packages,
//     create_sandbox {template} makes one, run_code imports the module;
//   JupyterLab's (@jupyterlab/services): the template is a kernelspec with cellbox_kind,
//     cellbox_from and cellbox_packages in its metadata; a kernel of it imports the module.
//
// Every import runs the same cell, which prints (whether the module was imported before the
// cell ran, the file it came from): a preloaded module was already there, cloned from the
// template's zygote. Prints one JSON summary line, {"ok", "steps"}; exits 0 when every step
// passed, 1 otherwise, 2 on a hang (global deadline). The pytest side is
// tests/clients/test_templates_clients.py.
import { Template } from 'e2b';
import { Sandbox } from '@e2b/code-interpreter';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import jupyterlab from '@jupyterlab/services';
import WebSocket from 'ws';

import { scenario } from './scenario.mjs';

const { step, finish } = scenario('templates_clients.mjs',
  { requires: ['CELLBOX_TEMPLATE', 'CELLBOX_MODULE'] });

const template = process.env.CELLBOX_TEMPLATE;
const module = process.env.CELLBOX_MODULE;
const baseUrl = process.env.E2B_API_URL.replace(/\/+$/, '');
const token = process.env.E2B_API_KEY;
const IMPORT_CELL = `import sys\n_preloaded = ${JSON.stringify(module)} in sys.modules\n` +
  `import ${module}\nprint(repr((_preloaded, ${module}.__file__)))`;
// The cell's printed line: "(True, '/usr/...')".
const printedTuple = text => (text.match(/^\((True|False), '[^']*'\)$/m) || [null])[0];

// ---- E2B
await step('e2b_template_exists', async () => {
  const exists = await Template.exists(template);
  const alias = await Template.aliasExists(template);
  return { exists, alias_exists: alias, ok: exists === true && alias === true };
});

await step('e2b_template_missing', async () => {
  const exists = await Template.exists(`${template}-no-such-template`);
  return { exists, ok: exists === false };
});

await step('e2b_create_and_import', async () => {
  const sandbox = await Sandbox.create(template, { timeoutMs: 120_000 });
  try {
    const info = await sandbox.getInfo();
    const execution = await sandbox.runCode(IMPORT_CELL, { timeoutMs: 60_000 });
    const printed = printedTuple(execution.logs.stdout.join(''));
    return { template_id: info.templateId, printed,
             error: execution.error ? `${execution.error.name}: ${execution.error.value}` : null,
             ok: info.templateId === template && !execution.error && printed !== null };
  } finally {
    await sandbox.kill();
  }
});

// The built template's ENV and WORKDIR reach E2B's code and commands, as E2B's own templates'
// do: a command or cell that names no directory starts in WORKDIR.
const templateEnv = process.env.CELLBOX_TEMPLATE_ENV;
const templateWorkdir = process.env.CELLBOX_TEMPLATE_WORKDIR;
if (templateEnv && templateWorkdir) {
  await step('e2b_template_env_and_workdir', async () => {
    const [name, value] = templateEnv.split('=');
    const sandbox = await Sandbox.create(template, { timeoutMs: 120_000 });
    try {
      const command = await sandbox.commands.run(`pwd; printenv ${name}`);
      const [commandCwd, commandValue] = command.stdout.trim().split('\n');
      const execution = await sandbox.runCode(
        `import os\nprint(os.getcwd())\nprint(os.environ.get(${JSON.stringify(name)}))`);
      const [cellCwd, cellValue] = execution.logs.stdout.join('').trim().split('\n');
      return { commandCwd, commandValue, cellCwd, cellValue,
               ok: commandCwd === templateWorkdir && commandValue === value &&
                   cellCwd === templateWorkdir && cellValue === value };
    } finally {
      await sandbox.kill();
    }
  });
}

// ---- MCP
const textOf = result => (result.content || []).filter(c => c.type === 'text').map(c => c.text).join('\n');

const mcp = new Client({ name: 'cellbox-template-tests', version: '0.0.0' });
const transport = new StreamableHTTPClientTransport(new URL(baseUrl + '/mcp'), {
  requestInit: { headers: { Authorization: `token ${token}` } }
});
await step('mcp_connect', async () => {
  await mcp.connect(transport);
  return { ok: mcp.getServerVersion()?.name === 'cellbox' };
});

await step('mcp_tools_describe_templates', async () => {
  const { tools } = await mcp.listTools();
  const byName = Object.fromEntries(tools.map(t => [t.name, t]));
  const listing = byName.list_templates?.description ?? '';
  const templateArgument = byName.create_sandbox?.inputSchema?.properties?.template?.description ?? '';
  return { list_templates: listing, create_sandbox_template: templateArgument,
           ok: listing.includes('cellbox template build') && templateArgument.includes('cellbox template build') };
});

await step('mcp_list_templates', async () => {
  const result = await mcp.callTool({ name: 'list_templates', arguments: {} });
  const line = textOf(result).split('\n').find(l => l.startsWith(`${template}  `)) ?? null;
  const listed = (result.structuredContent?.templates || []).find(t => t.name === template) ?? null;
  return { line, listed, is_error: !!result.isError, ok: !result.isError && line !== null && listed !== null };
});

await step('mcp_create_and_import', async () => {
  const created = await mcp.callTool({ name: 'create_sandbox', arguments: { template, timeout_s: 120 } });
  const id = (textOf(created).match(/created sandbox (\S+)/) || [])[1];
  if (!id)
    return { created: textOf(created), ok: false };
  try {
    const ran = await mcp.callTool({ name: 'run_code', arguments: { sandbox_id: id, code: IMPORT_CELL } });
    const printed = printedTuple(textOf(ran));
    return { sandbox_id: id, created: textOf(created), printed, text: textOf(ran), is_error: !!ran.isError,
             ok: !ran.isError && printed !== null };
  } finally {
    await mcp.callTool({ name: 'delete_sandbox', arguments: { sandbox_id: id } });
  }
});

await step('mcp_unknown_template', async () => {
  const result = await mcp.callTool({ name: 'create_sandbox',
                                      arguments: { template: `${template}-no-such-template` } });
  return { text: textOf(result), ok: result.isError === true };
});
await transport.close().catch(() => {});

// ---- Kernel Gateway API (JupyterLab's client library)
const { ServerConnection, KernelManager, KernelSpecManager } = jupyterlab;
// Keep the library's own chatter off stdout's summary line.
console.debug = () => {};
console.log = (...args) => process.stderr.write(args.join(' ') + '\n');
const settings = ServerConnection.makeSettings({
  baseUrl: baseUrl + '/', wsUrl: baseUrl.replace(/^http/, 'ws') + '/', token, WebSocket
});

await step('jupyter_kernelspec', async () => {
  const specs = new KernelSpecManager({ serverSettings: settings });
  await specs.ready;
  await specs.refreshSpecs();
  // the library keeps a spec's metadata as it came; read it raw too, to see the server's fields
  const response = await ServerConnection.makeRequest(`${settings.baseUrl}api/kernelspecs`, {}, settings);
  const raw = (await response.json()).kernelspecs?.[template]?.spec?.metadata ?? null;
  const spec = specs.specs?.kernelspecs?.[template] ?? null;
  return { names: Object.keys(specs.specs?.kernelspecs ?? {}), display_name: spec?.display_name ?? null,
           metadata: raw, ok: spec !== null && raw !== null };
});

await step('jupyter_kernel_import', async () => {
  const kernels = new KernelManager({ serverSettings: settings });
  await kernels.ready;
  const kernel = await kernels.startNew({ name: template });
  try {
    const future = kernel.requestExecute({ code: IMPORT_CELL });
    let stdout = '', error = null;
    future.onIOPub = msg => {
      if (msg.header.msg_type === 'stream') stdout += msg.content.text;
      if (msg.header.msg_type === 'error') error = `${msg.content.ename}: ${msg.content.evalue}`;
    };
    const reply = await future.done;
    const printed = printedTuple(stdout);
    return { kernel_name: kernel.name, printed, error, status: reply.content.status,
             ok: kernel.name === template && reply.content.status === 'ok' && printed !== null };
  } finally {
    await kernel.shutdown();
    kernels.dispose();
  }
});

finish();
