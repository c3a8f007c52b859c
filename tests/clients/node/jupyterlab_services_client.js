// Drives a Jupyter server (here: cellboxd) with JupyterLab's own client library,
// @jupyterlab/services, the way JupyterLab does: KernelSpecManager, KernelManager and
// SessionManager over ServerConnection settings, the `ws` package as WebSocket.
//
//   CELLBOX_URL=http://127.0.0.1:8888/ CELLBOX_TOKEN=... node jupyterlab_services_client.js
//
// Prints one line per check, `RESULT {"step": ..., "ok": true|false, ...}`, then
// `RESULT {"step": "done", "ok": ...}`; exits 0 when every check passed, 1 otherwise, 2 on a
// hang (global deadline).
'use strict';

const WebSocket = require('ws');
const {
  ServerConnection,
  KernelManager,
  KernelSpecManager,
  SessionManager
} = require('@jupyterlab/services');

const baseUrl = process.env.CELLBOX_URL;
const token = process.env.CELLBOX_TOKEN || '';
const deadlineMs = Number(process.env.CELLBOX_CLIENT_DEADLINE_MS || 120000);
if (!baseUrl) {
  console.error('set CELLBOX_URL (and CELLBOX_TOKEN)');
  process.exit(64);
}

let failures = 0;
function report(step, ok, detail) {
  if (!ok) failures += 1;
  process.stdout.write('RESULT ' + JSON.stringify({ step, ok: !!ok, ...(detail || {}) }) + '\n');
}

// Keep the library's own chatter (console.debug/log) off stdout's RESULT lines.
console.debug = () => {};
console.log = (...args) => process.stderr.write(args.join(' ') + '\n');

const hang = setTimeout(() => {
  report('deadline', false, { message: `no completion within ${deadlineMs} ms` });
  process.exit(2);
}, deadlineMs);

async function execute(kernel, code, options = {}) {
  const future = kernel.requestExecute({ code, ...options });
  const iopub = [];
  future.onIOPub = msg => iopub.push(msg);
  const reply = await future.done;
  const text = t => iopub.filter(m => m.header.msg_type === 'stream' && m.content.name === t)
    .map(m => m.content.text).join('');
  const result = iopub.find(m => m.header.msg_type === 'execute_result');
  const error = iopub.find(m => m.header.msg_type === 'error');
  return {
    status: reply.content.status,
    stdout: text('stdout'),
    stderr: text('stderr'),
    result: result ? result.content.data['text/plain'] : null,
    ename: error ? error.content.ename : null,
    types: iopub.map(m => m.header.msg_type),
    reply
  };
}

async function main() {
  const settings = ServerConnection.makeSettings({
    baseUrl,
    wsUrl: baseUrl.replace(/^http/, 'ws'),
    token,
    WebSocket
  });

  // ---- kernel specs (the library drops specs without argv/display_name/language)
  const specs = new KernelSpecManager({ serverSettings: settings });
  await specs.ready;
  await specs.refreshSpecs();
  const all = specs.specs;
  report('kernelspecs', all && all.default === 'python3' && !!all.kernelspecs.python3, {
    default: all && all.default,
    names: all ? Object.keys(all.kernelspecs) : [],
    language: all && all.kernelspecs.python3 ? all.kernelspecs.python3.language : null
  });

  // ---- start a kernel and talk to it
  const kernels = new KernelManager({ serverSettings: settings });
  await kernels.ready;
  const kernel = await kernels.startNew({ name: 'python3' });
  const info = await kernel.info;
  report('kernel_info', info.status === 'ok' && info.language_info.name === 'python', {
    kernel_id: kernel.id,
    language: info.language_info.name,
    protocol_version: info.protocol_version
  });
  report('wire_protocol', true, { protocol: kernel._ws ? kernel._ws.protocol : null });

  let r = await execute(kernel, '1+1');
  report('execute_1+1', r.status === 'ok' && r.result === '2', { result: r.result, types: r.types });

  r = await execute(kernel, "print('hello from jupyterlab services')");
  report('execute_print', r.status === 'ok' && r.stdout === 'hello from jupyterlab services\n',
    { stdout: r.stdout });

  await execute(kernel, 'x = 41');
  r = await execute(kernel, 'x + 1');
  report('state', r.result === '42', { result: r.result });

  r = await execute(kernel, '1/0');
  report('error', r.status === 'error' && r.ename === 'ZeroDivisionError', { status: r.status, ename: r.ename });

  await kernels.refreshRunning();
  const running = Array.from(kernels.running()).map(m => m.id);
  report('running_list', running.includes(kernel.id), { running });

  // ---- interrupt a busy kernel
  const loop = kernel.requestExecute({ code: "print('spinning', flush=True)\nwhile True:\n    pass" });
  await new Promise(resolve => {
    loop.onIOPub = msg => {
      if (msg.header.msg_type === 'stream') resolve();
    };
  });
  await kernel.interrupt();
  const loopReply = await loop.done;
  report('interrupt', loopReply.content.status === 'error' && loopReply.content.ename === 'KeyboardInterrupt',
    { status: loopReply.content.status, ename: loopReply.content.ename });

  // ---- restart: fresh state, the library reconnects its WebSocket
  await kernel.restart();
  r = await execute(kernel, "'x' in dir()");
  report('restart', r.result === 'False', { result: r.result, status: kernel.status });

  // ---- sessions
  const sessions = new SessionManager({ kernelManager: kernels, serverSettings: settings });
  await sessions.ready;
  const session = await sessions.startNew({
    path: 'jlab-test.ipynb', type: 'notebook', name: 'jlab-test.ipynb', kernel: { name: 'python3' }
  });
  r = await execute(session.kernel, "'session ok'");
  report('session_execute', r.result === "'session ok'", {
    session_id: session.id, session_kernel_id: session.kernel.id, result: r.result
  });
  await sessions.refreshRunning();
  const sessionIds = Array.from(sessions.running()).map(m => m.id);
  report('session_list', sessionIds.includes(session.id), { sessions: sessionIds });
  await session.shutdown();
  await sessions.refreshRunning();
  report('session_shutdown', !Array.from(sessions.running()).map(m => m.id).includes(session.id), {});

  // ---- shut down
  const kernelId = kernel.id;
  await kernel.shutdown();
  await kernels.refreshRunning();
  const still = Array.from(kernels.running()).map(m => m.id);
  report('shutdown', !still.includes(kernelId), { kernel_id: kernelId, running: still });

  kernels.dispose();
  sessions.dispose();
  specs.dispose();
}

main().then(
  () => {
    clearTimeout(hang);
    report('done', failures === 0, { failures });
    process.exit(failures === 0 ? 0 : 1);
  },
  err => {
    clearTimeout(hang);
    report('exception', false, { message: String(err && err.stack ? err.stack : err) });
    process.exit(1);
  }
);
