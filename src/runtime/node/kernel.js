'use strict';
// kernel — cellbox's JavaScript and TypeScript kernel:
//
//   /usr/bin/node <share>/node/kernel.js [--typescript]
//
// cellbox-kernel (language_host.c) starts it with fd 3 a socket bringing the daemon's frames
// (docs/kernel-protocol.md), fd 4 a socket for its own frames and their acknowledgements
// (channel.js), and fd 1/2 the daemon's stdout/stderr pipes. It behaves as ipykernel
// does for Python: status busy, execute_input, output, the reply, status idle for each request.
// Cells run in this process's own V8 context (vm.Script), rewritten by cell.js so that their
// declarations persist; output goes straight to fd 1/2, never as `stream` messages.
// SIGINT interrupts a cell (breakOnSigint for a synchronous cell; a cell with a top-level await
// is abandoned where it waits).

const util = require('util');
const vm = require('vm');

const channel = require('./channel');
const cell = require('./cell');
const display = require('./display');
const introspect = require('./introspect');
const modules = require('./modules');
const typescript = require('./typescript');

const TYPESCRIPT = process.argv.includes('--typescript');
const REQUEST_FD = 3;
const FRAME_FD = 4;

// Output must reach the pipes before the frame that follows it (the ordering rule): Node writes
// pipes synchronously on Linux; this makes sure of it wherever the handle allows.
for (const stream of [process.stdout, process.stderr]) {
  if (stream._handle && typeof stream._handle.setBlocking === 'function') stream._handle.setBlocking(true);
}

function log(text) {
  process.stderr.write(`cellbox node kernel: ${text}\n`);
}

// ---------------------------------------------------------------------- running cells

const INTERRUPTED = { ename: 'Interrupted', evalue: 'the cell was interrupted (SIGINT)',
                      traceback: ['Interrupted: the cell was interrupted (SIGINT)'] };

let running = null; // the cell being run: { interrupt() }, null between cells

// SIGINT stops a synchronous loop through breakOnSigint (Node disables this listener while the
// script runs); during an await it ends the cell here; between cells it does nothing.
process.on('SIGINT', () => {
  if (running) running.interrupt();
});

function isThenable(value) {
  return value !== null && (typeof value === 'object' || typeof value === 'function') &&
    typeof value.then === 'function';
}

// Runs one cell: { hasValue, value }, or throws what the cell threw (INTERRUPTED, a
// CellSyntaxError, or the user's value).
async function runCell(source, count) {
  const filename = `cell[${count}]`;
  const javascript = TYPESCRIPT ? typescript.transpile(source, filename) : source;
  let rewritten;
  try {
    rewritten = cell.rewrite(javascript);
  } catch (error) {
    if (!(error instanceof SyntaxError) || !error.loc) throw error;
    const message = error.message.replace(/ \(\d+:\d+\)$/, '');
    throw new display.CellSyntaxError(display.describeSyntaxError(filename, javascript, error.loc.line, error.loc.column, message));
  }
  const script = new vm.Script(rewritten.code, { filename });
  let interrupt;
  const interrupted = new Promise((resolve, reject) => { interrupt = reject; });
  interrupted.catch(() => {});
  running = { interrupt: () => interrupt(INTERRUPTED) };
  try {
    // breakOnSigint takes SIGINT from our listener while the script runs, and a signal that
    // lands as the script returns is lost (Node's watchdog drops it): an await that follows
    // would never hear it. So only a cell without a top-level await uses it; an async cell's
    // SIGINT always reaches the listener, which ends the await (a loop that never yields is
    // the daemon's to kill).
    let value = script.runInThisContext({ breakOnSigint: !rewritten.isAsync, displayErrors: false });
    if (rewritten.isAsync || (rewritten.hasValue && isThenable(value))) value = await Promise.race([value, interrupted]);
    return { hasValue: rewritten.hasValue, value };
  } catch (error) {
    if (error && error.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED') throw INTERRUPTED;
    throw error;
  } finally {
    running = null;
  }
}

function describe(thrown) {
  if (thrown === INTERRUPTED) return INTERRUPTED;
  if (thrown instanceof display.CellSyntaxError) return thrown.description;
  const error = display.describeError(thrown);
  if (TYPESCRIPT) error.traceback = error.traceback.map(typescript.originalPosition);
  return error;
}

// ---------------------------------------------------------------------- messages

let lastRequest = null; // output from callbacks after a cell goes under the last request
let executionCount = 0;
let exitAfterIdle = false;

const frames = channel.open(REQUEST_FD, FRAME_FD, receive, () => process.exit(0));

function publish(msgType, content, parent) {
  frames.send(channel.message('iopub', msgType, content, parent));
}

function reply(request, content, metadata) {
  const replyType = request.header.msg_type.replace(/_request$/, '') + '_reply';
  frames.send(channel.message(request.channel, replyType, content, request, metadata));
}

function setGlobal(name, value) {
  Object.defineProperty(globalThis, name, { value, writable: true, configurable: true, enumerable: false });
}
setGlobal('require', modules.cellRequire);
setGlobal('display', display.makeDisplay((data) => publish('display_data', { data, metadata: {}, transient: {} }, lastRequest)));
setGlobal(cell.IMPORT_HELPER, modules.cellImport);

// A rejection or an exception nobody caught (a callback after its cell ended) is printed; the
// kernel goes on.
process.on('unhandledRejection', (reason) => {
  process.stderr.write(`Uncaught (in promise) ${describe(reason).traceback.join('\n')}\n`);
});
process.on('uncaughtException', (error) => {
  process.stderr.write(`Uncaught ${describe(error).traceback.join('\n')}\n`);
});

// cellbox's /v1 execute may carry variables for one execution: {"cellbox": {"env": {...}}} in
// the request's metadata. Returns what to put back.
function applyRequestEnvironment(request) {
  const extension = request.metadata && request.metadata.cellbox;
  const env = extension && typeof extension === 'object' ? extension.env : null;
  if (!env || typeof env !== 'object') return null;
  const saved = {};
  for (const [name, value] of Object.entries(env)) {
    if (typeof value !== 'string' || name === '' || name.includes('=')) continue;
    saved[name] = Object.prototype.hasOwnProperty.call(process.env, name) ? process.env[name] : null;
    process.env[name] = value;
  }
  return saved;
}

function restoreEnvironment(saved) {
  for (const [name, value] of Object.entries(saved || {})) {
    if (value === null) delete process.env[name];
    else process.env[name] = value;
  }
}

// {"channel": "cellbox", "type": "environment", "set": {...}, "cwd"?: "..."}: a kernel from the
// warm pool gets the variables and working directory its request asked for.
function handleInternal(frame) {
  if (frame.type !== 'environment') return;
  if (frame.set && typeof frame.set === 'object') {
    for (const [name, value] of Object.entries(frame.set))
      if (typeof value === 'string' && name !== '' && !name.includes('=')) process.env[name] = value;
  }
  if (typeof frame.cwd === 'string') {
    try {
      process.chdir(frame.cwd);
    } catch (error) {
      log(`cannot change to ${frame.cwd}: ${error.message}`);
    }
  }
}

let abortAfterError = false; // the request being handled failed with stop_on_error
const shellQueue = []; // shell requests not yet handled, in the order they came
const abortedRequests = new WeakSet(); // those of them to answer `aborted`

async function execute(request) {
  const content = request.content;
  const code = typeof content.code === 'string' ? content.code : '';
  const silent = content.silent === true;
  if (!silent && content.store_history !== false) executionCount += 1;
  const count = executionCount;
  if (!silent) publish('execute_input', { code, execution_count: count }, request);
  const saved = applyRequestEnvironment(request);
  const metadata = { started: channel.timestamp(), dependencies_met: true, engine: channel.session };
  try {
    const result = code.trim() === '' ? { hasValue: false } : await runCell(code, count);
    if (!silent && result.hasValue && result.value !== undefined)
      publish('execute_result', { execution_count: count, data: display.bundle(result.value), metadata: {} }, request);
    reply(request, { status: 'ok', execution_count: count, payload: [], user_expressions: {} },
          { ...metadata, status: 'ok' });
  } catch (thrown) {
    const error = describe(thrown);
    publish('error', error, request);
    reply(request, { status: 'error', execution_count: count, ...error, payload: [], user_expressions: {} },
          { ...metadata, status: 'error' });
    abortAfterError = content.stop_on_error !== false;
  } finally {
    restoreEnvironment(saved);
  }
}

function kernelInfo(request) {
  const languageInfo = TYPESCRIPT
    ? { name: 'typescript', version: typescript.version(), mimetype: 'text/typescript',
        file_extension: '.ts', pygments_lexer: 'typescript', codemirror_mode: 'typescript' }
    : { name: 'javascript', version: process.versions.node, mimetype: 'application/javascript',
        file_extension: '.js', pygments_lexer: 'javascript', codemirror_mode: 'javascript' };
  reply(request, {
    status: 'ok',
    protocol_version: channel.PROTOCOL_VERSION,
    implementation: 'cellbox-node',
    implementation_version: '1.0',
    language_info: languageInfo,
    banner: `Node.js ${process.version}${TYPESCRIPT ? `, TypeScript ${typescript.version()}` : ''} (cellbox)`,
    help_links: [{ text: 'Node.js', url: 'https://nodejs.org/docs/latest/api/' }],
  });
}

function stringField(request, name) {
  return typeof request.content[name] === 'string' ? request.content[name] : '';
}

function isComplete(request) {
  const code = stringField(request, 'code');
  const status = TYPESCRIPT ? typescript.completeness(code) : cell.completeness(code);
  reply(request, status === 'incomplete' ? { status, indent: '' } : { status });
}

// ---------------------------------------------------------------------- dispatch

const handlers = {
  execute_request: execute,
  kernel_info_request: kernelInfo,
  complete_request: (request) => reply(request, introspect.complete(stringField(request, 'code'), request.content.cursor_pos)),
  inspect_request: (request) => reply(request, introspect.inspect(stringField(request, 'code'), request.content.cursor_pos)),
  is_complete_request: isComplete,
  history_request: (request) => reply(request, { status: 'ok', history: [] }),
  comm_info_request: (request) => reply(request, { status: 'ok', comms: {} }),
  interrupt_request: (request) => {
    if (running) running.interrupt(); // an awaited cell; a synchronous one cannot hear this
    reply(request, { status: 'ok' });
  },
  shutdown_request: (request) => {
    reply(request, { status: 'ok', restart: request.content.restart === true });
    exitAfterIdle = true;
  },
};

// One request inside its busy/idle. `aborting`: an execute_request waiting when a cell failed
// with stop_on_error, answered `aborted`.
async function handle(request, aborting) {
  if (request.channel === 'shell') lastRequest = request;
  publish('status', { execution_state: 'busy' }, request);
  const msgType = request.header.msg_type;
  try {
    if (aborting) {
      reply(request, { status: 'aborted', execution_count: executionCount },
            { started: channel.timestamp(), dependencies_met: true, engine: channel.session, status: 'aborted' });
    } else if (Object.prototype.hasOwnProperty.call(handlers, msgType)) {
      await handlers[msgType](request);
    } else if (msgType.endsWith('_request')) {
      // A client waiting for a reply gets one that says why, instead of waiting forever.
      const evalue = `the JavaScript kernel does not handle ${msgType}`;
      reply(request, { status: 'error', ename: 'UnknownRequest', evalue, traceback: [`UnknownRequest: ${evalue}`] });
    } else {
      log(`ignoring a ${msgType}: not a request`);
    }
  } catch (error) {
    log(`${msgType} failed: ${util.inspect(error)}`);
  }
  if (abortAfterError) {
    // Before idle, as ipykernel's _abort_queues: a request sent after the idle is never
    // aborted. Frames already written to fd 3 are read in the loop's next poll phase; an
    // immediate set now runs before it (this turn's check phase), so the second one runs after.
    abortAfterError = false;
    await new Promise((resolve) => setImmediate(() => setImmediate(resolve)));
    for (const waiting of shellQueue)
      if (waiting.header.msg_type === 'execute_request') abortedRequests.add(waiting);
  }
  const idle = channel.message('iopub', 'status', { execution_state: 'idle' }, request);
  frames.send(idle); // returns once it is relayed
  if (exitAfterIdle) process.exit(0);
}

let serving = false; // serveShell is running the queue

async function serveShell() {
  if (serving) return;
  serving = true;
  while (shellQueue.length) {
    const request = shellQueue.shift();
    await handle(request, abortedRequests.has(request));
  }
  serving = false;
}

function receive(frame) {
  if (frame.channel === 'cellbox') {
    handleInternal(frame);
    return;
  }
  const header = frame.header;
  if (!header || typeof header !== 'object' || typeof header.msg_type !== 'string') {
    log('ignoring a frame without a header.msg_type');
    return;
  }
  if (!frame.content || typeof frame.content !== 'object') frame.content = {};
  if (frame.channel === 'control') {
    handle(frame, false); // not behind a running cell, as ipykernel's control thread
  } else if (frame.channel === 'shell') {
    shellQueue.push(frame);
    serveShell();
  }
  // stdin: an input_reply nobody asked for (input is not supported): dropped, as ipykernel does.
}

publish('status', { execution_state: 'starting' }, null);

// A TypeScript kernel loads the compiler (~200 ms) right after saying `starting`, while the
// client is still connecting, instead of in its first cell.
if (TYPESCRIPT) setImmediate(typescript.load);
