import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';

/** One apt source, as found on the host (one-line and deb822 forms both map to this). */
export interface AptSource {
  types: string[];
  uris: string[];
  suites: string[];
  components: string[];
}

export interface HostAptConfig {
  /** The host's own codename (from os-release), the suite its sources name. */
  codename: string;
  sources: AptSource[];
}

/** Suites that have no -updates / -security companions. */
const ROLLING = new Set(['sid', 'unstable', 'experimental', 'rc-buggy']);

/**
 * Reads the host's apt sources (sources.list, sources.list.d/*.list and *.sources). The service
 * never names a mirror itself: whatever the host uses (a mirror, a proxy, a snapshot) is used.
 */
export async function readHostAptConfig(etc = '/etc'): Promise<HostAptConfig> {
  const aptDir = join(etc, 'apt');
  const sources: AptSource[] = [];
  const main = await readFile(join(aptDir, 'sources.list'), 'utf8').catch(() => '');
  sources.push(...parseOneLine(main));
  const dir = join(aptDir, 'sources.list.d');
  const names = (await readdir(dir).catch(() => [] as string[])).sort();
  for (const name of names) {
    if (name.endsWith('.list')) sources.push(...parseOneLine(await readFile(join(dir, name), 'utf8')));
    else if (name.endsWith('.sources')) sources.push(...parseDeb822(await readFile(join(dir, name), 'utf8')));
  }
  const osRelease = await readFile(join(etc, 'os-release'), 'utf8').catch(() => '');
  const codename = /^VERSION_CODENAME=("?)([^"\n]*)\1$/m.exec(osRelease)?.[2] ?? '';
  return { codename, sources };
}

export function parseOneLine(text: string): AptSource[] {
  const out: AptSource[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.replace(/#.*/, '').trim();
    if (line === '') continue;
    // `deb [opt=val ...] uri suite comp...`: options are dropped (mmdebstrap sets signed-by itself).
    const m = /^(deb|deb-src)\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)\s*(.*)$/.exec(line);
    if (!m) continue;
    out.push({ types: [m[1]!], uris: [m[2]!], suites: [m[3]!], components: m[4]!.split(/\s+/).filter(Boolean) });
  }
  return out;
}

export function parseDeb822(text: string): AptSource[] {
  const out: AptSource[] = [];
  for (const stanza of text.split(/\n\s*\n/)) {
    const fields = new Map<string, string>();
    let last: string | undefined;
    for (const line of stanza.split('\n')) {
      if (line.startsWith('#') || line.trim() === '') continue;
      if (/^\s/.test(line) && last) {
        fields.set(last, `${fields.get(last)} ${line.trim()}`);
        continue;
      }
      const i = line.indexOf(':');
      if (i < 0) continue;
      last = line.slice(0, i).trim().toLowerCase();
      fields.set(last, line.slice(i + 1).trim());
    }
    if ((fields.get('enabled') ?? 'yes').toLowerCase() === 'no') continue;
    const list = (k: string) => (fields.get(k) ?? '').split(/\s+/).filter(Boolean);
    const src: AptSource = { types: list('types'), uris: list('uris'), suites: list('suites'), components: list('components') };
    if (src.types.length && src.uris.length && src.suites.length) out.push(src);
  }
  return out;
}

/**
 * The host's Debian sources re-aimed at `suite`, in one-line form (mmdebstrap reads either form on
 * stdin, but one-line lets us emit only the entries that apply). A host suite `bookworm-updates`
 * becomes `<suite>-updates`; sources for other codenames (third-party repos) are left out.
 */
export function sourcesForSuite(host: HostAptConfig, suite: string): string {
  const lines: string[] = [];
  for (const src of host.sources) {
    if (!src.types.includes('deb')) continue;
    for (const uri of src.uris) {
      for (const s of src.suites) {
        const target = retarget(s, host.codename, suite);
        if (target === undefined) continue;
        const comps = src.components.length ? src.components : ['main'];
        lines.push(`deb ${uri} ${target} ${comps.join(' ')}`);
      }
    }
  }
  return [...new Set(lines)].join('\n') + '\n';
}

function retarget(hostSuite: string, codename: string, suite: string): string | undefined {
  if (!codename) return hostSuite === suite ? suite : undefined;
  if (hostSuite === codename) return suite;
  const m = /^([^-/]+)([-/].+)$/.exec(hostSuite);
  if (!m || m[1] !== codename) return undefined;
  if (ROLLING.has(suite)) return undefined;
  // Before bullseye the security suite was `<suite>/updates`.
  if (m[2] === '-security' && (suite === 'buster' || suite === 'stretch')) return `${suite}/updates`;
  return suite + m[2];
}

/**
 * Whether the host's Debian mirror still carries `suite` (old releases move to an archive host the
 * host's sources do not name). 'unknown' when no mirror answered at all (then mmdebstrap decides).
 */
export async function debianSuiteAvailability(
  host: HostAptConfig,
  suite: string,
  timeoutMs = 10_000,
): Promise<{ state: 'available' | 'missing' | 'unknown'; checked: string[] }> {
  const mirrors = new Set<string>();
  for (const src of host.sources) {
    if (!src.types.includes('deb') || !src.suites.includes(host.codename)) continue;
    for (const u of src.uris) if (/^https?:\/\//.test(u)) mirrors.add(u.replace(/\/+$/, ''));
  }
  const checked: string[] = [];
  let answered = false;
  for (const m of mirrors) {
    for (const file of ['InRelease', 'Release']) {
      const url = `${m}/dists/${suite}/${file}`;
      checked.push(url);
      try {
        const res = await fetch(url, { method: 'HEAD', signal: AbortSignal.timeout(timeoutMs) });
        answered = true;
        if (res.ok) return { state: 'available', checked };
      } catch {
        /* unreachable: try the next */
      }
    }
  }
  return { state: answered ? 'missing' : 'unknown', checked };
}
