'use strict';
// typescript — a TypeScript kernel's cells through Debian's compiler (node-typescript,
// ts.transpileModule): types stripped, not checked, then the JavaScript pipeline (cell.js).
// The compiler is loaded by a TypeScript kernel only (it takes ~200 ms to load).

const { SourceMap } = require('module');

const display = require('./display');

let typescriptModule = null; // loaded by a TypeScript kernel only
function load() {
  if (typescriptModule === null) typescriptModule = require('/usr/share/nodejs/typescript');
  return typescriptModule;
}

function lineAndColumn(source, position) {
  const before = source.slice(0, position);
  const line = (before.match(/\n/g) || []).length + 1;
  return { line, column: position - (before.lastIndexOf('\n') + 1) };
}

// An import the cell itself does not use is kept (a later cell uses it): TypeScript 5 says so
// with verbatimModuleSyntax and reports preserveValueImports as deprecated, an error; 4.x has
// only the latter.
function keepImports(ts) {
  return Number(ts.versionMajorMinor.split('.')[0]) >= 5
    ? { verbatimModuleSyntax: true }
    : { preserveValueImports: true, isolatedModules: true };
}

// Types are stripped, not checked (transpileModule): a type error is not an error here.
function transpile(source, filename) {
  const ts = load();
  const output = ts.transpileModule(source, {
    fileName: 'cell.ts',
    reportDiagnostics: true,
    compilerOptions: {
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.ESNext, // imports stay imports; cell.js turns them into import()
      ...keepImports(ts),
      removeComments: false,
      sourceMap: true, // a stack names the TypeScript cell's lines, not the compiled ones
    },
  });
  const failure = output.diagnostics.find((d) => d.category === ts.DiagnosticCategory.Error);
  if (failure) {
    const { line, column } = lineAndColumn(source, failure.start || 0);
    const message = ts.flattenDiagnosticMessageText(failure.messageText, '\n');
    throw new display.CellSyntaxError(display.describeSyntaxError(filename, source, line, column, message));
  }
  rememberSourceMap(filename, output.sourceMapText);
  return output.outputText.replace(/\n\/\/# sourceMappingURL=\S*\s*$/, '\n');
}

// Each TypeScript cell's source map, by its file name (cell[N]): an error thrown later, from a
// callback, may come from any earlier cell. The oldest go first past MAX_SOURCE_MAPS.
const MAX_SOURCE_MAPS = 2000;
const sourceMaps = new Map();

function rememberSourceMap(filename, text) {
  try {
    sourceMaps.set(filename, new SourceMap(JSON.parse(text)));
  } catch (error) {
    return; // no map: the compiled lines are shown
  }
  if (sourceMaps.size > MAX_SOURCE_MAPS) sourceMaps.delete(sourceMaps.keys().next().value);
}

// `at cell[3]:2:7` in a traceback line, with the line and column of the TypeScript cell.
function originalPosition(line) {
  return line.replace(/(cell\[\d+\]):(\d+):(\d+)/g, (whole, filename, row, column) => {
    const map = sourceMaps.get(filename);
    const entry = map ? map.findEntry(Number(row) - 1, Number(column) - 1) : null;
    if (!entry || typeof entry.originalLine !== 'number') return whole;
    return `${filename}:${entry.originalLine + 1}:${entry.originalColumn + 1}`;
  });
}

function completeness(source) {
  const ts = load();
  const file = ts.createSourceFile('cell.ts', source, ts.ScriptTarget.ES2022, false, ts.ScriptKind.TS);
  const problems = file.parseDiagnostics || [];
  if (problems.length === 0) return 'complete';
  return problems.some((d) => d.start >= source.trimEnd().length) ? 'incomplete' : 'invalid';
}

function version() {
  return load().version;
}

module.exports = { load, version, transpile, completeness, originalPosition };
