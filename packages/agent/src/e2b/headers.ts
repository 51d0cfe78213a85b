/**
 * The Fetch standard's Headers, for Connect's server side in envd.cjs (build.mjs injects it in
 * place of the global). Node's own global Headers is undici's: touching it the first time loads all
 * of undici (fetch, its HTTP/1 and HTTP/2 clients, WebSocket), about 40 ms of CPU and over a MiB of
 * heap in a sandbox on the first E2B call, for a map of strings. Connect's server uses construction,
 * get/set/append/has/delete, forEach and iteration; all of Headers' interface is here but its guard
 * (no Request/Response owns these). One difference: forEach and the iterators go over a snapshot,
 * where the standard's are live; Connect deletes names from within forEach (copyHeaders) and means
 * them all.
 */

type HeadersInitLike = Iterable<Iterable<string>> | Record<string, string> | undefined | null;

/** RFC 9110 token: what a header name may be. */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** A header value: no NUL, CR or LF (after trimming HTTP whitespace). */
const BAD_VALUE = /[\0\r\n]/;
const EDGE_WHITESPACE = /^[\t\n\r ]+|[\t\n\r ]+$/g;

function checkName(name: unknown): string {
  const s = String(name);
  if (!TOKEN.test(s)) throw new TypeError(`Headers: invalid header name ${JSON.stringify(s)}`);
  return s.toLowerCase();
}

function normalizeValue(value: unknown): string {
  const s = String(value).replace(EDGE_WHITESPACE, '');
  if (BAD_VALUE.test(s)) throw new TypeError('Headers: invalid header value');
  return s;
}

export class Headers implements Iterable<[string, string]> {
  /** Lower-cased name to its values in the order appended. */
  readonly #map = new Map<string, string[]>();

  constructor(init?: HeadersInitLike) {
    if (init === undefined || init === null) return;
    if (typeof init !== 'object') throw new TypeError('Headers: init must be an object, an iterable of pairs, or undefined');
    if (Symbol.iterator in init) {
      for (const pair of init as Iterable<Iterable<string>>) {
        const kv = [...pair];
        if (kv.length !== 2) throw new TypeError('Headers: each header in init must be a [name, value] pair');
        this.append(kv[0]!, kv[1]!);
      }
      return;
    }
    for (const name of Object.keys(init)) this.append(name, (init as Record<string, string>)[name]!);
  }

  append(name: string, value: string): void {
    const key = checkName(name);
    const v = normalizeValue(value);
    const list = this.#map.get(key);
    if (list) list.push(v);
    else this.#map.set(key, [v]);
  }

  set(name: string, value: string): void {
    this.#map.set(checkName(name), [normalizeValue(value)]);
  }

  delete(name: string): void {
    this.#map.delete(checkName(name));
  }

  get(name: string): string | null {
    return this.#map.get(checkName(name))?.join(', ') ?? null;
  }

  getSetCookie(): string[] {
    return [...(this.#map.get('set-cookie') ?? [])];
  }

  has(name: string): boolean {
    return this.#map.has(checkName(name));
  }

  /** Sorted by name, values of one name combined with ", " (set-cookie ones each on their own). */
  #pairs(): Array<[string, string]> {
    const out: Array<[string, string]> = [];
    for (const key of [...this.#map.keys()].sort()) {
      const values = this.#map.get(key)!;
      if (key === 'set-cookie') for (const v of values) out.push([key, v]);
      else out.push([key, values.join(', ')]);
    }
    return out;
  }

  forEach(callback: (value: string, name: string, headers: Headers) => void, thisArg?: unknown): void {
    for (const [k, v] of this.#pairs()) callback.call(thisArg, v, k, this);
  }

  *entries(): IterableIterator<[string, string]> {
    yield* this.#pairs();
  }

  *keys(): IterableIterator<string> {
    for (const [k] of this.#pairs()) yield k;
  }

  *values(): IterableIterator<string> {
    for (const [, v] of this.#pairs()) yield v;
  }

  [Symbol.iterator](): IterableIterator<[string, string]> {
    return this.entries();
  }

  get [Symbol.toStringTag](): string {
    return 'Headers';
  }
}
