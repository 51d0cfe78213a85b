// Test scaffolding only: names under a test's wildcard domain (`*.cluster.test`) resolve to one
// loopback address in this process, as a wildcard DNS record would lead clients to the edge. Host
// mode's public_host needs DNS; a test has none. Imported by a test, or preloaded into a child
// process (the sbx CLI) with NODE_OPTIONS=--import=<this file's URL> and SANDBOXD_TEST_DNS set.
import dns from 'node:dns';

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | dns.LookupAddress[], family?: number) => void;

const routes = new Map<string, string>();
let installed = false;

/** `*.<domain>` (and `<domain>`) resolve to `address` (IPv4) from now on, in this process. */
export function resolveDomainTo(domain: string, address: string): void {
  routes.set(domain.toLowerCase(), address);
  if (installed) return;
  installed = true;
  const original = dns.lookup;
  const patched = (hostname: string, options: unknown, callback?: unknown) => {
    const cb = (typeof options === 'function' ? options : callback) as LookupCallback;
    const opts = (typeof options === 'object' && options !== null ? options : {}) as dns.LookupOptions;
    const host = hostname.toLowerCase();
    for (const [d, a] of routes) {
      if (host === d || host.endsWith(`.${d}`)) {
        process.nextTick(() => (opts.all ? cb(null, [{ address: a, family: 4 }]) : cb(null, a, 4)));
        return;
      }
    }
    return (original as (...a: unknown[]) => void)(hostname, options, callback);
  };
  (dns as { lookup: unknown }).lookup = patched;
}

/** The environment of a child process that should resolve the domain the same way. */
export function childEnv(domain: string, address: string): Record<string, string> {
  return { NODE_OPTIONS: `--import=${import.meta.url}`, SANDBOXD_TEST_DNS: `${domain}=${address}` };
}

const preset = process.env.SANDBOXD_TEST_DNS;
if (preset) {
  const [domain, address] = preset.split('=');
  if (domain && address) resolveDomainTo(domain, address);
}
