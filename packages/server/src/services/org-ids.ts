/**
 * Organizations as the API shows them. Stored ids are `org_` and 20 hex digits; answers give the
 * same 80-bit number in decimal (a digits-only string: clients that model the organization id as
 * an integer, like the official Python client, read it; the spec's type stays a string). Both
 * forms are accepted wherever an organization is named.
 */
const STORED = /^org_([0-9a-f]{20})$/;
const PUBLIC = /^[0-9]{1,25}$/;
const MAX = 1n << 80n;

/** The id an answer shows: decimal digits for a stored `org_` id; any other id as it is. */
export function publicOrgId(id: string): string {
  const m = STORED.exec(id);
  return m ? BigInt(`0x${m[1]}`).toString(10) : id;
}

/** The stored id a public (decimal) id names, or undefined when `s` is not one. */
export function storedOrgId(s: string): string | undefined {
  if (!PUBLIC.test(s)) return undefined;
  const n = BigInt(s);
  return n < MAX ? `org_${n.toString(16).padStart(20, '0')}` : undefined;
}
