import { parse, type Node } from 'acorn';

/**
 * Turns one JavaScript cell into a script whose top-level names outlive it, as a notebook's do:
 *
 *   var NAMES; (async () => { globalThis.F = F; BODY
 *   })()
 *
 * - `var`, `let` and `const` declarations become assignments to those global names (so running a
 *   cell again does not fail with "already declared", and the next cell sees them);
 * - classes become assignments; function declarations stay (hoisted in the cell) and are copied
 *   to the global names first thing;
 * - `import` statements become dynamic imports (`__sbxImport`, provided by the kernel);
 * - top-level `await` works (the body is an async function);
 * - a last expression statement is returned in a box (`[value]`), so that a promise it ends with is
 *   the value, not awaited; a cell that is one object literal (`{a: 1}`) is that object;
 * - `export` in front of a declaration is dropped.
 * Everything keeps its line (only line 1 gets a prefix), so errors point at the user's lines.
 * `var` inside a top-level block or loop stays the cell's own. Null when the cell does not parse:
 * the caller compiles it as it is for the engine's own message.
 */
export function prepareCell(source: string): string | null {
  // A #! line stays a line, but empty.
  let code = source.startsWith('#!') ? source.replace(/^#![^\n]*/, '') : source;
  if (/^\s*\{[\s\S]*\}\s*$/.test(code) && isExpression(`(${code})`)) code = `(${code})`;
  const program = parseCell(code);
  if (!program) return null;
  const names = new Set<string>();
  const functions: string[] = [];
  const edits: Array<{ start: number; end: number; text: string }> = [];
  const body = (program as unknown as { body: Node[] }).body;
  let imports = 0;
  body.forEach((stmt, i) => {
    let s = stmt as any;
    if (s.type === 'ExportNamedDeclaration' && s.declaration) {
      edits.push({ start: s.start, end: s.declaration.start, text: '' });
      s = s.declaration;
    }
    const text = (n: Node) => code.slice(n.start, n.end);
    if (s.type === 'VariableDeclaration') {
      const parts: string[] = [];
      for (const d of s.declarations) {
        for (const n of boundNames(d.id)) names.add(n);
        if (d.init) parts.push(`void (${text(d.id)} = (${text(d.init)}));`);
        else if (s.kind !== 'var') parts.push(`void (${text(d.id)} = undefined);`);
      }
      edits.push({ start: s.start, end: s.end, text: parts.join(' ') });
    } else if (s.type === 'FunctionDeclaration' && s.id) {
      names.add(s.id.name);
      functions.push(s.id.name);
    } else if (s.type === 'ClassDeclaration' && s.id) {
      names.add(s.id.name);
      edits.push({ start: s.start, end: s.end, text: `void (${s.id.name} = ${text(s)});` });
    } else if (s.type === 'ImportDeclaration') {
      const m = `__sbxModule${imports++}`;
      const parts = [`const ${m} = await __sbxImport(${text(s.source)});`];
      for (const sp of s.specifiers) {
        names.add(sp.local.name);
        if (sp.type === 'ImportDefaultSpecifier') parts.push(`${sp.local.name} = ${m}.default;`);
        else if (sp.type === 'ImportNamespaceSpecifier') parts.push(`${sp.local.name} = ${m};`);
        else parts.push(`${sp.local.name} = ${m}[${JSON.stringify(sp.imported.name ?? sp.imported.value)}];`);
      }
      edits.push({ start: s.start, end: s.end, text: parts.join(' ') });
    } else if (s.type === 'ExpressionStatement' && i === body.length - 1 && !s.directive) {
      edits.push({ start: s.start, end: s.end, text: `return [(${text(s.expression)})];` });
    }
  });
  // The function copies go after the directives ('use strict' must stay first to count).
  const firstStatement = body.find((st) => !(st as any).directive);
  const copies = functions.map((f) => `globalThis[${JSON.stringify(f)}] = ${f}; `).join('');
  if (copies) edits.push({ start: firstStatement?.start ?? code.length, end: firstStatement?.start ?? code.length, text: copies });
  let out = code;
  for (const e of edits.sort((a, b) => b.start - a.start || b.end - a.end)) {
    // What replaced a statement keeps its line count, so later lines keep their numbers.
    const lost = (code.slice(e.start, e.end).match(/\n/g) ?? []).length - (e.text.match(/\n/g) ?? []).length;
    out = out.slice(0, e.start) + e.text + '\n'.repeat(Math.max(0, lost)) + out.slice(e.end);
  }
  const hoisted = names.size ? `var ${[...names].join(', ')}; ` : '';
  return `${hoisted}(async () => { ${out}\n})()`;
}

function isExpression(code: string): boolean {
  try {
    parse(code, { ecmaVersion: 'latest', sourceType: 'script' });
    return true;
  } catch {
    return false;
  }
}

function parseCell(code: string): Node | null {
  const opts = { ecmaVersion: 'latest', allowAwaitOutsideFunction: true, allowHashBang: true, allowReturnOutsideFunction: false } as const;
  try {
    return parse(code, { ...opts, sourceType: 'script' });
  } catch {
    try {
      // `import` statements parse only as a module.
      return parse(code, { ...opts, sourceType: 'module' });
    } catch {
      return null;
    }
  }
}

/** The names a declaration pattern binds. */
export function boundNames(p: any): string[] {
  if (!p) return [];
  switch (p.type) {
    case 'Identifier':
      return [p.name];
    case 'ObjectPattern':
      return p.properties.flatMap((q: any) => boundNames(q.type === 'RestElement' ? q.argument : q.value));
    case 'ArrayPattern':
      return p.elements.flatMap((q: any) => boundNames(q));
    case 'RestElement':
      return boundNames(p.argument);
    case 'AssignmentPattern':
      return boundNames(p.left);
    default:
      return [];
  }
}
