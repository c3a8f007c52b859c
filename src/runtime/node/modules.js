'use strict';
// modules — `require` and `import` in a cell resolve from the kernel's working directory (its
// node_modules, then its parents'), then from npm's global folder and Debian's node-* packages,
// as a user who ran `npm install x` or `apt install node-x` there expects.

const Module = require('module');
const path = require('path');
const url = require('url');

const EXTRA_MODULE_DIRS = ['/usr/local/lib/node_modules', '/usr/share/nodejs'];

function isPathLike(id) {
  return id.startsWith('./') || id.startsWith('../') || id === '.' || id === '..' || path.isAbsolute(id);
}

// { base, file }: a require() rooted at the working directory and what `id` resolves to.
function resolve(id) {
  const base = Module.createRequire(path.join(process.cwd(), '[cell]'));
  try {
    return { base, file: base.resolve(id) };
  } catch (error) {
    if (error.code !== 'MODULE_NOT_FOUND' || isPathLike(id)) throw error;
    for (const dir of EXTRA_MODULE_DIRS) {
      try {
        return { base, file: base.resolve(path.join(dir, id)) };
      } catch (ignored) {
        // not there either: the next folder, then the first error
      }
    }
    throw error;
  }
}

function cellRequire(id) {
  const { base, file } = resolve(id);
  return base(file);
}
cellRequire.resolve = (id) => resolve(id).file;
cellRequire.cache = Module._cache;

// import(specifier) from a cell: a module namespace.
function cellImport(specifier) {
  if (typeof specifier !== 'string' || specifier.startsWith('node:') || specifier.startsWith('file:') ||
      specifier.startsWith('data:') || Module.builtinModules.includes(specifier))
    return import(specifier);
  let file;
  try {
    file = resolve(specifier).file;
  } catch (error) {
    // An ES-only package (its "exports" has no "require"), or a path require() cannot load.
    if (!isPathLike(specifier)) return import(specifier);
    file = path.resolve(process.cwd(), specifier);
  }
  return Module.builtinModules.includes(file) ? import(file) : import(url.pathToFileURL(file).href);
}

module.exports = { cellRequire, cellImport };
