import { join } from 'node:path';
import type { Config } from '../config/index.js';
import type { Log } from './shared.js';

export interface Listening {
  /** The API's address. */
  url: string;
  /** The bootstrap key (the operator's admin key). */
  apiKey: string;
}

/** The lines a terminal gets: where the service listens, the key, a first command. */
export function bannerLines(config: Pick<Config, 'gateway'>, l: Listening): string[] {
  const g = config.gateway;
  return [
    '',
    `sandboxd is listening on ${l.url}`,
    `  API key:   ${l.apiKey}`,
    `  try:       curl -s -H 'X-API-Key: ${l.apiKey}' ${l.url}/v1/templates`,
    `  console:   ${l.url}/console    API reference: ${l.url}/docs`,
    `  sandboxes: public_host on ${g.mode === 'port' ? `${g.publicHostname} ports ${g.portMin}-${g.portMax}` : `*.${g.domain}:${g.hostModePort}`}`,
    '',
  ];
}

/**
 * Says where the service listens and which key opens it. On a terminal, the banner in plain text on
 * stdout, the key included. Anywhere else (systemd's journal, a container's log, a pipe) stdout and
 * the JSON log lines usually end in one stream: there the same is one log event, with the key's
 * whereabouts and never the key, which no log line carries. `banner`: the banner too, off a
 * terminal (the all-in-one: `npm start` prints where it listens and the key, wherever its output
 * goes; a cluster's replicas run under a service manager, and keep their stream JSON).
 */
export function announce(
  config: Pick<Config, 'gateway' | 'bootstrapApiKey' | 'dataDir'>,
  l: Listening,
  log: Log,
  out: { isTTY?: boolean; write(s: string): unknown } = process.stdout,
  opts: { banner?: boolean } = {},
): void {
  if (out.isTTY || opts.banner) out.write(`${bannerLines(config, l).join('\n')}\n`);
  if (out.isTTY) return;
  const g = config.gateway;
  log('sandboxd is listening', {
    url: l.url,
    console: `${l.url}/console`,
    api_reference: `${l.url}/docs`,
    public_host: g.mode === 'port' ? `${g.publicHostname}:${g.portMin}-${g.portMax}` : `*.${g.domain}:${g.hostModePort}`,
    // Where the operator finds the bootstrap key: the setting it came from, or the file it was made into.
    api_key_in: config.bootstrapApiKey ? 'SANDBOXD_BOOTSTRAP_API_KEY' : join(config.dataDir, 'api-key'),
  });
}
