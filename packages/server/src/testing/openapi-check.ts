// Checks of the OpenAPI document's schemas and examples, and of real answers against them: used by
// http/openapi.test.ts (the document and the routes that need no sandbox) and by
// e2e/src/openapi-conformance.test.ts (the agent and the rest, on real sandboxes).
import assert from 'node:assert/strict';
import { Ajv2020 } from 'ajv/dist/2020.js';

/** The schema with every object closed: a field it does not list fails (nothing undocumented). */
export function closed(schema: any): any {
  if (Array.isArray(schema)) return schema.map(closed);
  if (!schema || typeof schema !== 'object') return schema;
  const out = Object.fromEntries(Object.entries(schema).map(([k, v]) => [k, closed(v)]));
  if (out.type === 'object' && out.properties && out.additionalProperties === undefined && out.patternProperties === undefined) out.unevaluatedProperties = false;
  return out;
}

/**
 * Asserts values against the document's schemas (JSON Schema 2020-12, as OpenAPI 3.1 has them).
 * `closed`: objects may hold only the fields their schema lists.
 */
export function validator(opts: { closed?: boolean } = {}): (schema: unknown, value: unknown, where: string) => void {
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  ajv.addFormat('binary', true);
  return (schema, value, where) => {
    const check = ajv.compile(opts.closed ? closed(schema) : (schema as object));
    assert.ok(check(value), `${where}: ${ajv.errorsText(check.errors)}\n${JSON.stringify(value).slice(0, 2000)}`);
  };
}

/** A schema that says something: not {}, not a bare object with no properties, not a bare "success". */
export function describes(schema: any, media: string): boolean {
  if (!schema || typeof schema !== 'object') return false;
  const union = schema.anyOf ?? schema.oneOf;
  if (union) return union.length > 0 && union.every((s: unknown) => describes(s, media));
  if (media === 'application/json' || media === 'multipart/form-data') return schema.type === 'object' && Object.keys(schema.properties ?? {}).length > 0;
  return typeof schema.type === 'string';
}

/** The examples of a media type object (or of x-websocket's messages): `example` and `examples`. */
export const examplesOf = (m: { example?: unknown; examples?: Record<string, { value: unknown }> }): unknown[] => [
  ...(m.example !== undefined ? [m.example] : []),
  ...Object.values(m.examples ?? {}).map((e) => e.value),
];

/** The events of a text/event-stream text: `event:` and `data:` lines; comments and keep-alives skipped. */
export function sseEvents(text: string): Array<{ event: string; data: string }> {
  const out: Array<{ event: string; data: string }> = [];
  for (const block of text.split('\n\n')) {
    const lines = block.split('\n').filter((l) => l !== '' && !l.startsWith(':'));
    if (lines.length === 0) continue;
    const event = lines.find((l) => l.startsWith('event: '))?.slice(7);
    const data = lines.filter((l) => l.startsWith('data: ')).map((l) => l.slice(6)).join('\n');
    assert.ok(event && data, `an event block with event and data: ${JSON.stringify(block)}`);
    out.push({ event, data });
  }
  return out;
}

/** The success response the document gives an operation for `status`, or a failed assertion. */
export function documentedSuccess(doc: any, method: string, path: string, status: number): any {
  const op = doc.paths[path]?.[method.toLowerCase()];
  assert.ok(op, `${method} ${path} is not in the document`);
  const r = op.responses[String(status)];
  assert.ok(r && (status === 101 || (status >= 200 && status < 300)), `${method} ${path}: ${status} is not a documented success (${Object.keys(op.responses).join(', ')})`);
  return r;
}
