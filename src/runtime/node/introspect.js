'use strict';
// introspect — complete_request and inspect_request: names the kernel knows now (globals, the
// properties of a dotted name's current value), read without calling anything but getters.

const vm = require('vm');

const display = require('./display');

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

// complete_reply's content for `code` with the cursor at code point `cursorPosition`.
function complete(code, cursorPosition) {
  const cursor = Number.isInteger(cursorPosition) ? cursorPosition : codePoints(code);
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
  return { status: 'ok', matches, cursor_start: cursor - codePoints(prefix), cursor_end: cursor, metadata: {} };
}

// inspect_reply's content: the value of the (dotted) name under the cursor.
function inspect(code, cursorPosition) {
  const cursor = Number.isInteger(cursorPosition) ? cursorPosition : codePoints(code);
  const at = unitIndex(code, cursor);
  const left = (/[A-Za-z_$][\w$.]*$/.exec(code.slice(0, at)) || [''])[0];
  const right = (/^[\w$]*/.exec(code.slice(at)) || [''])[0];
  const dotted = (left + right).replace(/^\.+|\.+$/g, '');
  const value = dotted ? lookup(dotted) : undefined;
  if (value === undefined) return { status: 'ok', found: false, data: {}, metadata: {} };
  const kind = typeof value === 'function' ? `function ${value.name || dotted}(${value.length} parameters)` : typeof value;
  return { status: 'ok', found: true, data: { 'text/plain': `${dotted}: ${kind}\n${display.inspect(value)}` }, metadata: {} };
}

module.exports = { complete, inspect };
