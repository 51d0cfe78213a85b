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
 * - a last expression statement is returned: the cell's value.
 * Everything keeps its line (only line 1 gets a prefix), so errors point at the user's lines.
 * Null when the cell does not parse: the caller compiles it as it is for the engine's own message.
 */
export function prepareCell(code: string): string | null {
  const program = parseCell(code);
  if (!program) return null;
  const names = new Set<string>();
  const functions: string[] = [];
  const edits: Array<{ start: number; end: number; text: string }> = [];
  const body = (program as unknown as { body: Node[] }).body;
  let imports = 0;
  body.forEach((stmt, i) => {
    const s = stmt as any;
    const text = (n: Node) => code.slice(n.start, n.end);
    if (s.type === 'VariableDeclaration') {
      const parts: string[] = [];
      for (const d of s.declarations) {
        for (const n of boundNames(d.id)) names.add(n);
        if (d.init) parts.push(`void (${text(d.id)} = ${text(d.init)});`);
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
      edits.push({ start: s.start, end: s.end, text: `return (${text(s.expression)});` });
    }
  });
  let out = code;
  for (const e of edits.sort((a, b) => b.start - a.start)) out = out.slice(0, e.start) + e.text + out.slice(e.end);
  const hoisted = names.size ? `var ${[...names].join(', ')}; ` : '';
  const copies = functions.map((f) => `globalThis[${JSON.stringify(f)}] = ${f}; `).join('');
  return `${hoisted}(async () => { ${copies}${out}\n})()`;
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
