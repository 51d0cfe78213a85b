import { existsSync, mkdirSync, statfsSync } from 'node:fs';
import { lookup } from 'node:dns/promises';
import { join } from 'node:path';
import type { Config } from '../config/index.js';
import { secureDataDir } from '../data-dir.js';
import { readHostAptConfig } from '../images/apt-sources.js';
import { blockedRangeOf, type EgressEndpoint } from '../runtime/host.js';
import { CrunRuntime } from '../runtime/index.js';
import { ensureSystemPackages } from '../runtime/system-packages.js';
import type { Log } from './shared.js';

/**
 * Images get the host's apt sources, so a mirror or proxy in a blocked range (an internal one on
 * 10.x, say) would break every `apt-get install` in sandboxes and builds. The host already trusts
 * these sources: sandboxes may reach each one's address on its port (not the rest of its range,
 * never its DNS ports), unless SANDBOXD_EGRESS_ALLOW_APT_SOURCES=false, in which case the start
 * says what breaks and how to allow it.
 */
async function blockedAptSources(egressAllow: string[]): Promise<Array<EgressEndpoint & { host: string; range: string }>> {
  const endpoints = new Map<string, { host: string; port: number }>();
  for (const src of (await readHostAptConfig()).sources) {
    for (const uri of src.uris) {
      try {
        const u = new URL(uri);
        if (u.protocol !== 'http:' && u.protocol !== 'https:') continue;
        const port = Number(u.port) || (u.protocol === 'https:' ? 443 : 80);
        endpoints.set(`${u.hostname}:${port}`, { host: u.hostname, port });
      } catch {
        /* not a URL (cdrom:, file:) */
      }
    }
  }
  const out: Array<EgressEndpoint & { host: string; range: string }> = [];
  for (const { host, port } of endpoints.values()) {
    // A resolver that does not answer must not hold the start up for long.
    const addrs = await Promise.race([lookup(host, { all: true, family: 4 }).catch(() => []), new Promise<[]>((r) => setTimeout(() => r([]), 3000).unref())]);
    for (const { address } of addrs) {
      const range = blockedRangeOf(address, egressAllow);
      if (range) out.push({ host, address, port, range });
    }
  }
  return out;
}

/** This machine's runtime, its host prepared: system packages, apt sources' reachability, bridge, rules. */
export async function openRuntime(config: Config, log: Log): Promise<CrunRuntime> {
  await ensureSystemPackages(log);
  const aptExceptions = await blockedAptSources(config.runtime.egressAllow).catch((err: unknown) => {
    log(`checking the apt sources' reachability: ${String(err)}`);
    return [];
  });
  for (const a of aptExceptions) {
    log(
      config.runtime.allowAptSources
        ? `sandboxes may reach the host's apt source ${a.host} (${a.address} port ${a.port}), although ${a.range} is blocked (SANDBOXD_EGRESS_ALLOW_APT_SOURCES=false closes it)`
        : `warning: sandboxes cannot reach the apt source ${a.host} (${a.address} is in the blocked range ${a.range}); allow it with SANDBOXD_EGRESS_ALLOW_APT_SOURCES=true or SANDBOXD_EGRESS_ALLOW=${a.address}/32`,
    );
  }
  const runtime = new CrunRuntime({
    dataDir: config.dataDir,
    agentBundlePath: config.agentBundlePath,
    agentEnv: { SANDBOXD_PROCESS_OUTPUT_RING_KB: String(config.processOutputRingKb) },
    cgroupParent: config.runtime.cgroupParent,
    bridgeName: config.runtime.bridge,
    subnetCidr: config.runtime.subnet,
    egressAllow: config.runtime.egressAllow,
    egressAllowEndpoints: config.runtime.allowAptSources ? aptExceptions.map(({ address, port }) => ({ address, port })) : [],
    log,
  });
  await runtime.setupHost();
  return runtime;
}

/** The size of the filesystem a directory is on, GB. */
export function diskGbOf(dir: string): number {
  const fs = statfsSync(dir);
  return Math.floor((fs.blocks * fs.bsize) / 1024 ** 3);
}

/** What every role that runs sandboxes checks first: root, the agent bundle, a private data directory. */
export async function prepareMachine(config: Config, log: Log): Promise<void> {
  if (process.getuid?.() !== 0) {
    throw new Error('sandboxd must run as root: it creates containers, mounts, cgroups and network namespaces (try: sudo npm start)');
  }
  if (!existsSync(config.agentBundlePath)) {
    throw new Error(`agent bundle ${config.agentBundlePath} is missing: run "npm run build" first`);
  }
  // Agents' sockets are <data dir>/sandboxes/<id>/agent.sock, and a unix socket's path is at most
  // 107 bytes: past that, every boot would fail with a bare ENOENT.
  const longest = join(config.dataDir, 'sandboxes', 'x'.repeat(24), 'agent.sock').length;
  if (longest > 107) {
    throw new Error(`SANDBOXD_DATA_DIR is too long (${config.dataDir.length} characters): sandboxes' agent sockets under it would pass the 107-byte limit of a unix socket's path; use a directory of at most ${config.dataDir.length - (longest - 107)} characters`);
  }
  mkdirSync(config.dataDir, { recursive: true, mode: 0o700 });
  for (const f of await secureDataDir(config.dataDir, config.layersDir)) {
    log(`${f.path}: mode ${f.from.toString(8)} → ${f.to.toString(8)} (secrets and tenant data are root's alone)`);
  }
}
