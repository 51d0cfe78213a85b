// Which module may import which: the server's layers, the packages' boundaries, and no cycle
// anywhere. The one place these rules are written; `npm run lint` runs it, so `npm test` fails on a
// broken one, naming the file, the import and the rule.
//
// `import type` counts like any import: a type names another module's shape, so a type that points
// up ties the lower layer to the upper one as surely as a call, and a cycle of types is a pair of
// modules that cannot be read, moved or split apart (each of today's cycles was one).
import ts from 'typescript';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

/**
 * packages/server/src, top to bottom. A module (a folder, or a file at the top) imports only the
 * modules of the levels below its own, but those NO_SKIP keeps from it; modules of one level import
 * each other only as SAME_LEVEL says. A folder or file not named here fails the check until it is placed.
 */
const SERVER_LAYERS = [
  ['cli.ts', 'cli-*.ts'],
  ['main.ts'],
  ['roles/'],
  ['http/'],
  // The daemon's settings, read from the environment: composition reads them and hands each layer
  // below its own part (a gateway takes its GatewayConfig), so nothing below http/ needs this folder.
  ['config/'],
  ['gateway/'],
  ['services/'],
  ['placement/'],
  ['node/'],
  ['builder/'],
  ['images/'],
  ['runtime/'],
  // Leaves: they import nothing of the server, anything may use them.
  ['logging.ts', 'data-dir.ts'],
];

/** Imports between modules of one level: [from, to]. */
const SAME_LEVEL = [
  // `sandboxd` dispatches to its subcommands.
  ['cli.ts', 'cli-*.ts'],
];

/** Layers further down that a layer may not reach past the ones between, though the order alone would allow it. */
const NO_SKIP = [
  [['http/', 'gateway/'], ['placement/', 'node/', 'builder/', 'images/', 'runtime/'], 'it asks services/, which hold the rules, and never the machine'],
  [['services/'], ['node/'], 'a node is reached through placement/, which chooses it'],
];

/**
 * Beside the layers: modules that import none of the server's other modules (but the leaves), each
 * with the only modules that may import it.
 */
const SERVER_SIDE = {
  // The state. Runtimes, images, builds and nodes are told what they need, never read it themselves;
  // the gateway reaches it only through the services. config/: it parses a database URL.
  'store/': ['cli.ts', 'cli-*.ts', 'main.ts', 'roles/', 'http/', 'config/', 'services/', 'placement/'],
};

/**
 * Files of a side module that a module the side list leaves out may import all the same, each with
 * why: shapes only, no code of the side module runs there.
 */
const SERVER_SHAPES = [
  {
    from: 'node/',
    to: 'store/types/index.ts',
    why: "a node registers, heartbeats and reads its sandboxes in the registry's row shapes (node/membership.ts): the types, not the store (a node runs with no store)",
  },
];

/** Fixtures for the tests: only test files (and other fixtures) import them. */
const SERVER_TEST_ONLY = 'testing/';

/**
 * Imports that break the rules above today, each with why it may stay for now. From a file to a
 * file: a new import of the same kind is still an error.
 */
const SERVER_EXCEPTIONS = [
];

/**
 * The workspaces' packages and which of the others each may import (tests: also `testsMay`).
 * A package is imported by its name, and only when its package.json lists it (dependencies; tests:
 * devDependencies too), or its published build would not find it. A relative path into another
 * package is always an error.
 */
const PACKAGES = {
  protocol: { dir: 'packages/protocol', may: [] },
  // Published on its own: its own copy of what it needs from the protocol (a devDependency, for tests).
  sdk: { dir: 'packages/sdk', may: [], testsMay: ['protocol'] },
  // Speaks to the service only through the SDK (and the protocol's shared definitions).
  cli: { dir: 'packages/cli', may: ['sdk', 'protocol', 'mcp'] },
  // sandboxd's tools over MCP: they call the service through the SDK only.
  mcp: { dir: 'packages/mcp', may: ['sdk'] },
  // Ships inside every sandbox: nothing of the server.
  agent: { dir: 'packages/agent', may: ['protocol'] },
  // The MCP route serves packages/mcp, which calls the API through the SDK.
  server: { dir: 'packages/server', may: ['protocol', 'mcp', 'sdk'] },
  // Runs in a browser, bundled on its own.
  console: { dir: 'packages/console', may: [] },
};

/** Checked for cycles only: harnesses that reach into the others' builds on purpose. */
const CYCLES_ONLY = ['e2e', 'bench'];

const SCOPE = '@sandboxd/';

// ---------------------------------------------------------------------------------------------

const isTest = (file) => file.endsWith('.test.ts');

function sourcesUnder(dir) {
  const out = [];
  if (!existsSync(dir)) return out;
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) {
      if (name !== 'node_modules' && name !== 'dist') out.push(...sourcesUnder(p));
    } else if (/\.(c|m)?tsx?$/.test(name) && !/\.d\.(c|m)?ts$/.test(name)) out.push(p);
  }
  return out;
}

/** Every import of a file: static, `export from`, dynamic `import()` and `import('x')` types. */
function importsOf(file) {
  const sf = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
  const out = [];
  const add = (node, spec, reexport = false) => {
    if (!spec || !ts.isStringLiteralLike(spec)) return;
    out.push({ spec: spec.text, line: sf.getLineAndCharacterOfPosition(node.getStart(sf)).line + 1, reexport });
  };
  const visit = (node) => {
    if (ts.isImportDeclaration(node)) add(node, node.moduleSpecifier);
    else if (ts.isExportDeclaration(node)) add(node, node.moduleSpecifier, true);
    else if (ts.isImportEqualsDeclaration(node) && ts.isExternalModuleReference(node.moduleReference)) add(node, node.moduleReference.expression);
    else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) add(node, node.arguments[0]);
    else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)) add(node, node.argument.literal);
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return out;
}

/** A relative specifier as the file it names (`./x.js` is `./x.ts` before the build). */
function resolveRelative(from, spec) {
  const p = resolve(dirname(from), spec);
  const candidates = [p.replace(/\.js$/, '.ts'), p.replace(/\.mjs$/, '.mts'), p.replace(/\.cjs$/, '.cts'), p.replace(/\.js$/, '.tsx'), p, join(p, 'index.ts')];
  return candidates.find((c) => existsSync(c) && statSync(c).isFile()) ?? p;
}

const rel = (p) => relative(ROOT, p).split(sep).join('/');

function packageOf(file) {
  for (const [name, pkg] of Object.entries(PACKAGES)) if (file.startsWith(join(ROOT, pkg.dir) + sep)) return name;
  return undefined;
}

// --- the server's layers ----------------------------------------------------------------------

const SERVER_SRC = join(ROOT, PACKAGES.server.dir, 'src');

/** `gateway/` for anything in that folder, the file's name for a file at the top. */
function serverModule(file) {
  const r = relative(SERVER_SRC, file).split(sep);
  return r.length > 1 ? `${r[0]}/` : r[0];
}

const matches = (pattern, module) => (pattern.includes('*') ? new RegExp(`^${pattern.replace(/[.]/g, '\\.').replace('*', '[^/]*')}$`).test(module) : pattern === module);
const levelOf = (module) => SERVER_LAYERS.findIndex((level) => level.some((p) => matches(p, module)));
const sideOf = (module) => Object.keys(SERVER_SIDE).find((p) => matches(p, module));
const describe = (module) => SERVER_LAYERS.find((level) => level.some((p) => matches(p, module)))?.join(', ') ?? module;

/** Why `from` may not import `to` (two modules of the server), or null when it may. */
function layerRule(from, to) {
  if (from === to) return null;
  if (to === SERVER_TEST_ONLY) return `${SERVER_TEST_ONLY} holds test fixtures: only tests import it`;
  const toSide = sideOf(to);
  if (toSide) {
    return SERVER_SIDE[toSide].some((p) => matches(p, from)) ? null : `${toSide} may be imported only by ${SERVER_SIDE[toSide].join(', ')}`;
  }
  const a = levelOf(from);
  const b = levelOf(to);
  const fromSide = sideOf(from);
  if (fromSide) return b === SERVER_LAYERS.length - 1 ? null : `${fromSide} imports none of the server's modules but the leaves (${SERVER_LAYERS.at(-1).join(', ')})`;
  if (a < 0) return `${from} is not in the layer order: place it in SERVER_LAYERS`;
  if (b < 0) return `${to} is not in the layer order: place it in SERVER_LAYERS`;
  if (a < b) {
    const skip = NO_SKIP.find(([f, t]) => f.some((p) => matches(p, from)) && t.some((p) => matches(p, to)));
    return skip ? `${from} may not import ${to}: ${skip[2]} (NO_SKIP)` : null;
  }
  if (a === b) return SAME_LEVEL.some(([f, t]) => matches(f, from) && matches(t, to)) ? null : `${from} and ${to} are one level (${describe(from)}) and SAME_LEVEL does not let the one import the other`;
  return `${from} is below ${to} in SERVER_LAYERS; a module imports only the levels below its own`;
}

function checkServerImport(file, target, imp, errors, exceptionsUsed) {
  const from = serverModule(file);
  const to = serverModule(target);
  // Tests and their fixtures may use anything of the package.
  if (isTest(file) || from === SERVER_TEST_ONLY || from === to) return;
  const fromFile = relative(SERVER_SRC, file).split(sep).join('/');
  const toFile = relative(SERVER_SRC, target).split(sep).join('/');
  const excepted = (rule) => {
    const e = SERVER_EXCEPTIONS.find((x) => x.from === fromFile && x.to === toFile && (x.rule ?? 'layer') === rule);
    if (e) exceptionsUsed.add(e);
    return e !== undefined;
  };
  const shape = SERVER_SHAPES.some((x) => matches(x.from, from) && x.to === toFile);
  const why = shape ? null : layerRule(from, to);
  if (why && !excepted('layer')) errors.push(`${rel(file)}:${imp.line}: imports '${imp.spec}' (${toFile}): ${why}`);
  // A module that re-exports another folder's lets its importers reach that folder unseen.
  if (imp.reexport && !excepted('reexport')) {
    errors.push(`${rel(file)}:${imp.line}: re-exports '${imp.spec}' (${toFile}): import it where it is used, or move it where both may import it`);
  }
}

// --- the packages' boundaries -----------------------------------------------------------------

function checkPackageImport(file, imp, errors) {
  const pkg = packageOf(file);
  if (!pkg) return;
  const name = imp.spec.startsWith(SCOPE) ? imp.spec.slice(SCOPE.length).split('/')[0] : undefined;
  if (name === undefined || name === pkg) return;
  const def = PACKAGES[pkg];
  const allowed = [...def.may, ...(isTest(file) ? (def.testsMay ?? []) : [])];
  if (!allowed.includes(name)) {
    const says = allowed.length ? `only ${allowed.map((a) => SCOPE + a).join(', ')}` : 'no other package of the workspace';
    errors.push(`${rel(file)}:${imp.line}: imports '${imp.spec}': ${SCOPE}${pkg}${isTest(file) ? "'s tests" : ''} may import ${says}`);
    return;
  }
  const manifest = (def.manifest ??= JSON.parse(readFileSync(join(ROOT, def.dir, 'package.json'), 'utf8')));
  const listed = { ...manifest.dependencies, ...(isTest(file) ? manifest.devDependencies : {}) };
  if (!(SCOPE + name in listed)) {
    errors.push(`${rel(file)}:${imp.line}: imports '${imp.spec}', which ${def.dir}/package.json does not list in its ${isTest(file) ? 'dependencies or devDependencies' : 'dependencies'}`);
  }
}

// --- cycles -----------------------------------------------------------------------------------

/** Strongly connected components of more than one file (or a file that imports itself), Tarjan's. */
function cycles(graph) {
  let index = 0;
  const idx = new Map();
  const low = new Map();
  const stack = [];
  const on = new Set();
  const out = [];
  const connect = (v) => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    on.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!idx.has(w)) {
        connect(w);
        low.set(v, Math.min(low.get(v), low.get(w)));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v), idx.get(w)));
    }
    if (low.get(v) === idx.get(v)) {
      const scc = [];
      let w;
      do {
        w = stack.pop();
        on.delete(w);
        scc.push(w);
      } while (w !== v);
      if (scc.length > 1 || graph.get(v)?.has(v)) out.push(scc);
    }
  };
  for (const v of graph.keys()) if (!idx.has(v)) connect(v);
  return out;
}

/** One cycle through `start` within its component, for the message: the shortest, by BFS. */
function loopThrough(graph, scc, start) {
  const inScc = new Set(scc);
  const prev = new Map([[start, null]]);
  const queue = [start];
  while (queue.length) {
    const v = queue.shift();
    for (const w of graph.get(v) ?? []) {
      if (!inScc.has(w)) continue;
      if (w === start) {
        const path = [start];
        for (let x = v; x !== start; x = prev.get(x)) path.splice(1, 0, x);
        return [...path, start];
      }
      if (!prev.has(w)) {
        prev.set(w, v);
        queue.push(w);
      }
    }
  }
  return [start, start];
}

// --- the run ----------------------------------------------------------------------------------

const errors = [];
const exceptionsUsed = new Set();
const roots = [...Object.values(PACKAGES).map((p) => join(ROOT, p.dir, 'src')), ...CYCLES_ONLY.map((d) => join(ROOT, d, 'src'))];

for (const root of roots) {
  const graph = new Map();
  const pkg = packageOf(join(root, 'x'));
  const pkgDir = pkg ? join(ROOT, PACKAGES[pkg].dir) : dirname(root);
  for (const file of sourcesUnder(root)) {
    const edges = new Set();
    graph.set(file, edges);
    for (const imp of importsOf(file)) {
      if (!imp.spec.startsWith('.')) {
        checkPackageImport(file, imp, errors);
        continue;
      }
      const target = resolveRelative(file, imp.spec);
      if (pkg && !target.startsWith(pkgDir + sep)) {
        errors.push(`${rel(file)}:${imp.line}: imports '${imp.spec}' (${rel(target)}), outside ${PACKAGES[pkg].dir}: import another package by its name`);
        continue;
      }
      if (!target.startsWith(root + sep)) continue;
      edges.add(target);
      if (pkg === 'server') checkServerImport(file, target, imp, errors, exceptionsUsed);
    }
  }
  for (const scc of cycles(graph)) {
    const start = [...scc].sort()[0];
    const loop = loopThrough(graph, scc, start).map((f) => relative(root, f).split(sep).join('/'));
    const more = scc.length > loop.length - 1 ? ` (and ${scc.length - loop.length + 1} more files in the same tangle)` : '';
    errors.push(`${rel(root)}: import cycle: ${loop.join(' → ')}${more}; move what they share to a module of its own`);
  }
}

for (const e of SERVER_EXCEPTIONS) {
  if (!exceptionsUsed.has(e)) errors.push(`scripts/check-imports.mjs: the exception ${e.from} → ${e.to} matches no import now: delete it`);
}

if (errors.length) {
  console.error(`check-imports: ${errors.length} import rule${errors.length === 1 ? '' : 's'} broken (the rules: scripts/check-imports.mjs)`);
  for (const e of errors) console.error(`  ${e}`);
  process.exit(1);
}
