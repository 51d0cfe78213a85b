/** PostgreSQL URLs: checked, and named in messages without their secrets. */

/**
 * The URL as a WHATWG URL, or undefined when it is no postgres:// or postgresql:// URL. One with
 * credentials and an empty host (a unix socket, `?host=/run/postgresql`) is not a WHATWG URL: it
 * is read as if it had a host.
 */
function parse(url: string): { u: URL; noHost: boolean } | undefined {
  if (!/^postgres(ql)?:\/\//.test(url)) return undefined;
  const noHost = /^[a-z]+:\/\/[^/]*@\//i.test(url);
  try {
    return { u: new URL(noHost ? url.replace('@/', '@localhost/') : url), noHost };
  } catch {
    return undefined;
  }
}

export const isPostgresUrl = (url: string): boolean => parse(url) !== undefined;

/**
 * The URL with no secret in it (no password, no query parameter but a socket directory), to name
 * the database in messages and logs.
 */
export function describeUrl(url: string): string {
  const parsed = parse(url);
  if (!parsed) {
    // It may be a password pasted in the wrong place: at most its scheme is named.
    const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(url)?.[1];
    if (!scheme) return 'something that is not a URL';
    return /^postgres(ql)?$/.test(scheme) ? `a ${scheme}:// URL that does not parse` : `a ${scheme}:// URL, not a PostgreSQL one`;
  }
  const { u, noHost } = parsed;
  const socket = u.searchParams.get('host');
  const host = noHost ? '' : u.host || (socket ? '' : 'localhost');
  return `${u.protocol}//${u.username ? `${u.username}@` : ''}${host}${u.pathname}${socket ? `?host=${socket}` : ''}`;
}
