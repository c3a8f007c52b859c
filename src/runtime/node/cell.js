'use strict';
// cell — turns the code of one cell into a script that runs in the kernel's own V8 context and
// leaves its declarations behind for the next cell, as a notebook user expects:
//
//   - top-level let/const/class become `var`s (globals that a later cell may declare again;
//     V8 refuses a second `let x` in the same context);
//   - a cell with a top-level `await` (or a static import, which becomes one) runs inside an
//     async arrow function, its declared names hoisted to `var`s outside it and its
//     declarations turned into assignments, so they persist too;
//   - `import x from "m"` and friends become `await __cellbox_import__("m")` (static imports
//     are not allowed in a script), and `import("m")` becomes `__cellbox_import__("m")` (in a
//     vm.Script, import() needs --experimental-vm-modules); both resolve from the working
//     directory (modules.js);
//   - a cell that is one object literal (`{a: 1}`) is that object, as in Node's REPL, not a
//     block;
//   - the last statement, if it is an expression, is the cell's value (the script's completion
//     value, or the async function's return value).
//
// Edits never add or remove a line break before the code they change, so the line numbers in a
// stack trace are the cell's own.

const IMPORT_HELPER = '__cellbox_import__';

let acorn = null; // loaded on first use: the kernel says `starting` sooner
function parser() {
  if (acorn === null) acorn = require('/usr/share/nodejs/acorn');
  return acorn;
}

const PARSE_OPTIONS = {
  ecmaVersion: 'latest',
  sourceType: 'script',
  allowAwaitOutsideFunction: true,
  allowReturnOutsideFunction: false,
  allowImportExportEverywhere: true, // static imports are parsed in a script, then rewritten
  allowHashBang: true,
  locations: true,
};

function parse(code) {
  return parser().parse(code, PARSE_OPTIONS);
}

// "complete", "incomplete" (the parser ran out of input: more lines would finish it) or
// "invalid".
function completeness(code) {
  try {
    parse(code);
    return 'complete';
  } catch (error) {
    if (!(error instanceof SyntaxError)) throw error;
    return error.pos >= code.trimEnd().length || error.raisedAt >= code.length ? 'incomplete' : 'invalid';
  }
}

const FUNCTION_TYPES = new Set(['FunctionDeclaration', 'FunctionExpression', 'ArrowFunctionExpression']);

// Whether the statement awaits outside any function of its own (a top-level await).
function awaitsAtTopLevel(node) {
  if (node === null || typeof node !== 'object') return false;
  if (Array.isArray(node)) return node.some(awaitsAtTopLevel);
  if (typeof node.type !== 'string') return false;
  if (node.type === 'AwaitExpression') return true;
  if (node.type === 'ForOfStatement' && node.await) return true;
  if (FUNCTION_TYPES.has(node.type)) return false;
  for (const key of Object.keys(node)) {
    if (key === 'loc' || key === 'start' || key === 'end' || key === 'type') continue;
    const value = node[key];
    if (value !== null && typeof value === 'object' && awaitsAtTopLevel(value)) return true;
  }
  return false;
}

// The names a binding pattern declares (x, {a, b: c}, [d, ...e], {f = 1}).
function patternNames(pattern, names) {
  switch (pattern.type) {
    case 'Identifier': names.push(pattern.name); break;
    case 'ObjectPattern':
      for (const property of pattern.properties)
        patternNames(property.type === 'RestElement' ? property.argument : property.value, names);
      break;
    case 'ArrayPattern':
      for (const element of pattern.elements) if (element) patternNames(element, names);
      break;
    case 'RestElement': patternNames(pattern.argument, names); break;
    case 'AssignmentPattern': patternNames(pattern.left, names); break;
    default: break;
  }
  return names;
}

function newlines(text) {
  return '\n'.repeat((text.match(/\n/g) || []).length);
}

// `import d, {a, b as c} from "m"` as an expression statement that assigns the same names.
function importAssignment(source, statement) {
  const from = `await ${IMPORT_HELPER}(${JSON.stringify(statement.source.value)})`;
  const fields = [];
  let namespace = null;
  for (const specifier of statement.specifiers) {
    if (specifier.type === 'ImportNamespaceSpecifier') namespace = specifier.local.name;
    else if (specifier.type === 'ImportDefaultSpecifier') fields.push(`default: ${specifier.local.name}`);
    else {
      const imported = specifier.imported.type === 'Identifier' ? specifier.imported.name : specifier.imported.value;
      fields.push(`${JSON.stringify(imported)}: ${specifier.local.name}`);
    }
  }
  let expression;
  if (namespace !== null && fields.length) expression = `${namespace} = ${from}, {${fields.join(', ')}} = ${namespace}`;
  else if (namespace !== null) expression = `${namespace} = ${from}`;
  else if (fields.length) expression = `{${fields.join(', ')}} = ${from}`;
  else expression = from;
  return `;(${expression});${newlines(source.slice(statement.start, statement.end))}`;
}

function declaredNames(statement) {
  switch (statement.type) {
    case 'VariableDeclaration':
      return statement.declarations.flatMap((declarator) => patternNames(declarator.id, []));
    case 'ClassDeclaration':
    case 'FunctionDeclaration':
      return [statement.id.name];
    case 'ImportDeclaration':
      return statement.specifiers.map((specifier) => specifier.local.name);
    default:
      return [];
  }
}

// The import() expressions anywhere in `node`, inside functions too.
function importCalls(node, found) {
  if (node === null || typeof node !== 'object') return found;
  if (Array.isArray(node)) {
    for (const child of node) importCalls(child, found);
    return found;
  }
  if (node.type === 'ImportExpression') found.push(node);
  for (const key of Object.keys(node)) {
    if (key === 'loc') continue;
    const value = node[key];
    if (value !== null && typeof value === 'object') importCalls(value, found);
  }
  return found;
}

// Applies [position, deleteCount, text] edits to `source`, last first. Two at one position (an
// import() that is also the cell's value): the replacement goes first, the insertion before it.
function applyEdits(source, edits) {
  edits.sort((a, b) => b[0] - a[0] || b[1] - a[1]);
  let result = source;
  for (const [position, deleteCount, text] of edits)
    result = result.slice(0, position) + text + result.slice(position + deleteCount);
  return result;
}

// A script where every top-level statement runs at the script's own top level.
function rewriteScript(source, body, edits) {
  for (const statement of body) {
    if (statement.type === 'VariableDeclaration' && statement.kind !== 'var') {
      // `const` is 5 letters, `var  ` too: columns stay as written.
      edits.push([statement.start, statement.kind.length, 'var'.padEnd(statement.kind.length)]);
      for (const declarator of statement.declarations)
        if (declarator.init === null) edits.push([declarator.end, 0, ' = undefined']);
    } else if (statement.type === 'ClassDeclaration') {
      edits.push([statement.start, 0, `var ${statement.id.name} = `]);
      edits.push([statement.end, 0, ';']);
    }
  }
  return applyEdits(source, edits);
}

// A script whose statements run inside one async arrow function.
function rewriteAsync(source, body, edits, returnsValue) {
  const hoisted = new Set();
  const functionNames = [];
  for (const statement of body) {
    for (const name of declaredNames(statement)) hoisted.add(name);
    if (statement.type === 'VariableDeclaration') {
      const declarations = statement.declarations;
      edits.push([statement.start, statement.kind.length, ';(']);
      for (const declarator of declarations)
        if (declarator.init === null && statement.kind !== 'var') edits.push([declarator.end, 0, ' = undefined']);
      edits.push([declarations[declarations.length - 1].end, 0, ')']);
    } else if (statement.type === 'ClassDeclaration') {
      edits.push([statement.start, 0, `;${statement.id.name} = `]);
      edits.push([statement.end, 0, ';']);
    } else if (statement.type === 'FunctionDeclaration') {
      functionNames.push(statement.id.name); // hoisted inside the function; published at its start
    } else if (statement.type === 'ImportDeclaration') {
      edits.push([statement.start, statement.end - statement.start, importAssignment(source, statement)]);
    }
  }
  const last = body[body.length - 1];
  if (returnsValue) {
    edits.push([last.start, 0, 'return (']);
    edits.push([last.expression.end, 0, ')']);
  }
  const declare = hoisted.size ? `var ${[...hoisted].join(', ')}; ` : '';
  const publish = functionNames.map((name) => `globalThis[${JSON.stringify(name)}] = ${name}; `).join('');
  return `${declare}(async () => { ${publish}${applyEdits(source, edits)}\n})()`;
}

// `{a: 1}` alone is a block in a script; Node's REPL shows it as an object, and so does a cell.
function objectLiteralCell(source) {
  if (!/^\s*\{/.test(source) || !/\}\s*$/.test(source)) return null;
  const wrapped = `(${source}\n)`;
  let program;
  try {
    program = parse(wrapped);
  } catch (error) {
    return null; // a block after all ({ let x = 1 })
  }
  if (program.body.length !== 1 || importCalls(program.body, []).length || awaitsAtTopLevel(program.body)) return null;
  return { code: wrapped, isAsync: false, hasValue: true };
}

// { code, isAsync, hasValue } for `source`; throws acorn's SyntaxError (with .loc) when it does
// not parse.
function rewrite(source) {
  const objectLiteral = objectLiteralCell(source);
  if (objectLiteral !== null) return objectLiteral;
  const program = parse(source);
  const body = program.body;
  const edits = importCalls(body, []).map((call) => [call.start, 'import'.length, IMPORT_HELPER]);
  // `export` has no meaning in a cell: the declaration after it is kept.
  for (const statement of body) {
    if (statement.type === 'ExportNamedDeclaration' && statement.declaration) {
      edits.push([statement.start, statement.declaration.start - statement.start, '']);
    }
  }
  const statements = body.map((statement) =>
    statement.type === 'ExportNamedDeclaration' && statement.declaration ? statement.declaration : statement);
  const isAsync = statements.some((statement) => statement.type === 'ImportDeclaration' || awaitsAtTopLevel(statement));
  const last = statements[statements.length - 1];
  const hasValue = last !== undefined && last.type === 'ExpressionStatement';
  const code = isAsync ? rewriteAsync(source, statements, edits, hasValue) : rewriteScript(source, statements, edits);
  return { code, isAsync, hasValue };
}

module.exports = { rewrite, completeness, IMPORT_HELPER };
