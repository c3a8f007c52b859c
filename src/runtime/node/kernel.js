'use strict';
// kernel — cellbox's JavaScript and TypeScript kernel:
//
//   /usr/bin/node <share>/node/kernel.js [--typescript]
//
// cellbox-kernel (language_host.c) starts it with fd 3 a socket speaking the frames of
// docs/kernel-protocol.md and fd 1/2 the daemon's stdout/stderr pipes. It behaves as ipykernel
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
const modules = require('./modules');

const TYPESCRIPT = process.argv.includes('--typescript');
const CHANNEL_FD = 3;

// Output must reach the pipes before the frame that follows it (the ordering rule): Node writes
// pipes synchronously on Linux; this makes sure of it wherever the handle allows.
for (const stream of [process.stdout, process.stderr]) {
  if (stream._handle && typeof stream._handle.setBlocking === 'function') stream._handle.setBlocking(true);
}

function log(text) {
  process.stderr.write(`cellbox node kernel: ${text}\n`);
}

// ---------------------------------------------------------------------- TypeScript

let typescriptModule = null; // loaded by a TypeScript kernel only
function typescript() {
  if (typescriptModule === null) typescriptModule = require('/usr/share/nodejs/typescript');
  return typescriptModule;
}

// A syntax error found before the cell runs: thrown, then shown as V8 shows one.
class CellSyntaxError {
  constructor(description) {
    this.description = description;
  }
}

function lineAndColumn(source, position) {
  const before = source.slice(0, position);
  const line = (before.match(/\n/g) || []).length + 1;
  return { line, column: position - (before.lastIndexOf('\n') + 1) };
}

// Types are stripped, not checked (transpileModule): a type error is not an error here.
function transpile(source, filename) {
  const ts = typescript();
  const output = ts.transpileModule(source, {
    fileName: 'cell.ts',
    reportDiagnostics: true,
    compilerOptions: {
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.ESNext, // imports stay imports; cell.js turns them into import()
      preserveValueImports: true, // an import a later cell uses is kept
      isolatedModules: true,
      removeComments: false,
    },
  });
  const failure = output.diagnostics.find((d) => d.category === ts.DiagnosticCategory.Error);
  if (failure) {
    const { line, column } = lineAndColumn(source, failure.start || 0);
    const message = ts.flattenDiagnosticMessageText(failure.messageText, '\n');
    throw new CellSyntaxError(display.describeSyntaxError(filename, source, line, column, message));
  }
  return output.outputText;
}

function typescriptCompleteness(source) {
  const ts = typescript();
  const file = ts.createSourceFile('cell.ts', source, ts.ScriptTarget.ES2022, false, ts.ScriptKind.TS);
  const problems = file.parseDiagnostics || [];
  if (problems.length === 0) return 'complete';
  return problems.some((d) => d.start >= source.trimEnd().length) ? 'incomplete' : 'invalid';
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
  const javascript = TYPESCRIPT ? transpile(source, filename) : source;
  let rewritten;
  try {
    rewritten = cell.rewrite(javascript);
  } catch (error) {
    if (!(error instanceof SyntaxError) || !error.loc) throw error;
    const message = error.message.replace(/ \(\d+:\d+\)$/, '');
    throw new CellSyntaxError(display.describeSyntaxError(filename, javascript, error.loc.line, error.loc.column, message));
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
  if (thrown instanceof CellSyntaxError) return thrown.description;
  return display.describeError(thrown);
}

// ---------------------------------------------------------------------- messages

let lastRequest = null; // output from callbacks after a cell goes under the last request
let executionCount = 0;
let exitAfterIdle = false;

const frames = channel.open(CHANNEL_FD, receive, () => process.exit(0));

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

let abortAfterError = false;

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
    ? { name: 'typescript', version: typescript().version, mimetype: 'text/typescript',
        file_extension: '.ts', pygments_lexer: 'typescript', codemirror_mode: 'typescript' }
    : { name: 'javascript', version: process.versions.node, mimetype: 'application/javascript',
        file_extension: '.js', pygments_lexer: 'javascript', codemirror_mode: 'javascript' };
  reply(request, {
    status: 'ok',
    protocol_version: channel.PROTOCOL_VERSION,
    implementation: 'cellbox-node',
    implementation_version: '1.0',
    language_info: languageInfo,
    banner: `Node.js ${process.version}${TYPESCRIPT ? `, TypeScript ${typescript().version}` : ''} (cellbox)`,
    help_links: [{ text: 'Node.js', url: 'https://nodejs.org/docs/latest/api/' }],
  });
}

// ---------------------------------------------------------------------- completion, inspection

const KEYWORDS = ['await', 'break', 'case', 'catch', 'class', 'const', 'continue', 'debugger', 'default',
  'delete', 'do', 'else', 'export', 'extends', 'false', 'finally', 'for', 'function', 'if', 'import',
  'in', 'instanceof', 'let', 'new', 'null', 'return', 'static', 'super', 'switch', 'this', 'throw',
  'true', 'try', 'typeof', 'undefined', 'var', 'void', 'while', 'with', 'yield'];

// Jupyter counts the cursor in code points; JavaScript strings index UTF-16 units.
function unitIndex(code, cursor) {
  return Array.from(code).slice(0, cursor).join('').length;
}

function codePoints(text) {
  return Array.from(text).length;
}

// The value a dotted name (a.b.c) has now, or undefined. Only names and property reads: no call.
function lookup(dotted) {
  const [first, ...rest] = dotted.split('.').map((part) => part.trim());
  let value;
  try {
    value = vm.runInThisContext(first);
    for (const name of rest) value = value == null ? undefined : value[name];
  } catch (error) {
    return undefined;
  }
  return value;
}

function propertyNames(value) {
  const names = new Set();
  for (let object = Object(value), depth = 0; object && depth < 16; object = Object.getPrototypeOf(object), depth++)
    for (const name of Object.getOwnPropertyNames(object)) names.add(name);
  return [...names].filter((name) => /^[A-Za-z_$][\w$]*$/.test(name));
}

function complete(request) {
  const code = typeof request.content.code === 'string' ? request.content.code : '';
  const cursor = Number.isInteger(request.content.cursor_pos) ? request.content.cursor_pos : codePoints(code);
  const before = code.slice(0, unitIndex(code, cursor));
  const member = /([A-Za-z_$][\w$]*(?:\s*\.\s*[A-Za-z_$][\w$]*)*)\s*\.\s*([A-Za-z_$][\w$]*)?$/.exec(before);
  let prefix;
  let candidates;
  if (member) {
    prefix = member[2] || '';
    const value = lookup(member[1]);
    candidates = value == null ? [] : propertyNames(value);
  } else {
    prefix = (/[A-Za-z_$][\w$]*$/.exec(before) || [''])[0];
    candidates = [...propertyNames(globalThis), ...KEYWORDS];
  }
  const matches = [...new Set(candidates.filter((name) => name.startsWith(prefix)))].sort();
  reply(request, { status: 'ok', matches, cursor_start: cursor - codePoints(prefix), cursor_end: cursor, metadata: {} });
}

function inspectRequest(request) {
  const code = typeof request.content.code === 'string' ? request.content.code : '';
  const cursor = Number.isInteger(request.content.cursor_pos) ? request.content.cursor_pos : codePoints(code);
  const at = unitIndex(code, cursor);
  const left = (/[A-Za-z_$][\w$.]*$/.exec(code.slice(0, at)) || [''])[0];
  const right = (/^[\w$]*/.exec(code.slice(at)) || [''])[0];
  const dotted = (left + right).replace(/^\.+|\.+$/g, '');
  const value = dotted ? lookup(dotted) : undefined;
  if (value === undefined) {
    reply(request, { status: 'ok', found: false, data: {}, metadata: {} });
    return;
  }
  const kind = typeof value === 'function' ? `function ${value.name || dotted}(${value.length} parameters)` : typeof value;
  reply(request, { status: 'ok', found: true, data: { 'text/plain': `${dotted}: ${kind}\n${display.inspect(value)}` }, metadata: {} });
}

function isComplete(request) {
  const code = typeof request.content.code === 'string' ? request.content.code : '';
  const status = TYPESCRIPT ? typescriptCompleteness(code) : cell.completeness(code);
  reply(request, status === 'incomplete' ? { status, indent: '' } : { status });
}

// ---------------------------------------------------------------------- dispatch

const handlers = {
  execute_request: execute,
  kernel_info_request: kernelInfo,
  complete_request: complete,
  inspect_request: inspectRequest,
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
    } else {
      log(`ignoring a ${msgType} (no handler for it), as ipykernel does`);
    }
  } catch (error) {
    log(`${msgType} failed: ${util.inspect(error)}`);
  }
  const idle = channel.message('iopub', 'status', { execution_state: 'idle' }, request);
  if (exitAfterIdle) frames.send(idle, () => process.exit(0));
  else frames.send(idle);
}

const shellQueue = [];
const abortedRequests = new WeakSet();
let serving = false;

async function serveShell() {
  if (serving) return;
  serving = true;
  while (shellQueue.length) {
    const request = shellQueue.shift();
    await handle(request, abortedRequests.has(request));
    if (abortAfterError) {
      abortAfterError = false;
      // Frames already written to fd 3 arrive in the next poll: one turn of the loop first.
      await new Promise((resolve) => setImmediate(resolve));
      for (const waiting of shellQueue)
        if (waiting.header.msg_type === 'execute_request') abortedRequests.add(waiting);
    }
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
if (TYPESCRIPT) setImmediate(typescript);
