'use strict';
// display — what a value looks like to a Jupyter client (a mime bundle), the `display` global
// cells call for rich output, and a thrown value as ename/evalue/traceback.

const util = require('util');

const JUPYTER_DISPLAY = Symbol.for('Jupyter.display'); // Deno's convention for rich values

function inspect(value) {
  return util.inspect(value, { colors: false, depth: 4, maxArrayLength: 100, breakLength: 80 });
}

// The mime bundle for `value`: the one its [Symbol.for("Jupyter.display")]() returns, else
// text/plain as Node's REPL prints it.
function bundle(value) {
  if (value !== null && (typeof value === 'object' || typeof value === 'function')) {
    let method;
    try {
      method = value[JUPYTER_DISPLAY];
    } catch (error) {
      method = undefined; // a throwing getter (a Proxy): shown as text
    }
    if (typeof method === 'function') {
      const data = method.call(value);
      if (data !== null && typeof data === 'object') return data;
    }
  }
  return { 'text/plain': inspect(value) };
}

function base64(data, what) {
  if (typeof data === 'string') return data.replace(/^data:[^,]*;base64,/, '');
  if (data instanceof ArrayBuffer) return Buffer.from(data).toString('base64');
  if (ArrayBuffer.isView(data)) return Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('base64');
  throw new TypeError(`display.${what} takes a Buffer, a Uint8Array or a base64 string, not ${typeof data}`);
}

function text(data, what) {
  if (typeof data !== 'string') throw new TypeError(`display.${what} takes a string, not ${typeof data}`);
  return data;
}

// The `display` global: display(value) and display.<kind>(data), each one display_data.
// `publish(data)` sends it under the request being run (or the last one, from a callback).
function makeDisplay(publish) {
  function display(value) {
    publish(bundle(value));
  }
  display.html = (data) => publish({ 'text/html': text(data, 'html') });
  display.markdown = (data) => publish({ 'text/markdown': text(data, 'markdown') });
  display.svg = (data) => publish({ 'image/svg+xml': text(data, 'svg') });
  display.text = (data) => publish({ 'text/plain': text(data, 'text') });
  display.png = (data) => publish({ 'image/png': base64(data, 'png') });
  display.jpeg = (data) => publish({ 'image/jpeg': base64(data, 'jpeg') });
  display.json = (data) => publish({ 'application/json': JSON.parse(JSON.stringify(data)) });
  display.bundle = (data) => publish(data); // a mime bundle as given
  return display;
}

// Stack lines that belong to the kernel, not to the user's code.
function isKernelFrame(line) {
  return line.includes(__dirname + '/') || /\((node:|internal\/)/.test(line) || /at node:/.test(line);
}

// {ename, evalue, traceback} for a thrown value.
function describeError(error) {
  if (error instanceof Error || (error !== null && typeof error === 'object' && typeof error.stack === 'string')) {
    const ename = error.name || (error.constructor && error.constructor.name) || 'Error';
    const evalue = String(error.message === undefined ? '' : error.message);
    const stack = typeof error.stack === 'string' ? error.stack.split('\n') : [`${ename}: ${evalue}`];
    return { ename, evalue, traceback: stack.filter((line) => !isKernelFrame(line)) };
  }
  const ename = error === null ? 'null' : typeof error;
  const evalue = typeof error === 'string' ? error : inspect(error);
  return { ename, evalue, traceback: [`Uncaught ${inspect(error)}`] };
}

// A syntax error found before the cell runs (acorn's or TypeScript's): thrown, then shown as
// its description says.
class CellSyntaxError {
  constructor(description) {
    this.description = description;
  }
}

// A syntax error at `line`/`column` (1-based line, 0-based column) of `source`, shown as V8
// shows one: where, the line, a caret.
function describeSyntaxError(filename, source, line, column, message) {
  const text = source.split('\n')[line - 1] || '';
  return {
    ename: 'SyntaxError',
    evalue: message,
    traceback: [`${filename}:${line}`, text, ' '.repeat(column) + '^', '', `SyntaxError: ${message}`],
  };
}

module.exports = { bundle, makeDisplay, describeError, describeSyntaxError, CellSyntaxError, inspect };
