import { LOG_LEVELS } from '../logging.js';
import { bool, ConfigError } from './parse.js';
import type { Config } from './types.js';

export function logLevelFrom(env: NodeJS.ProcessEnv): string {
  const level = (env.SANDBOXD_LOG_LEVEL || 'info').trim().toLowerCase();
  if (!(LOG_LEVELS as readonly string[]).includes(level)) throw new ConfigError(`SANDBOXD_LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}, got "${env.SANDBOXD_LOG_LEVEL}"`);
  return level;
}

export function logFormatFrom(env: NodeJS.ProcessEnv): Config['logFormat'] {
  const f = (env.SANDBOXD_LOG_FORMAT || 'auto').trim().toLowerCase();
  if (f !== 'json' && f !== 'text' && f !== 'auto') throw new ConfigError(`SANDBOXD_LOG_FORMAT must be json, text or auto, got "${env.SANDBOXD_LOG_FORMAT}"`);
  return f;
}

export function metricsFrom(env: NodeJS.ProcessEnv): Config['metrics'] {
  const raw = env.SANDBOXD_METRICS_LISTEN?.trim();
  let listen: Config['metrics']['listen'] = null;
  if (raw) {
    const m = /^(\[[0-9a-fA-F:.]+\]|[\w.-]+):(\d{1,5})$/.exec(raw);
    const port = Number(m?.[2]);
    if (!m || port < 1 || port > 65535) throw new ConfigError(`SANDBOXD_METRICS_LISTEN must be host:port (e.g. 127.0.0.1:9464), got "${raw}"`);
    listen = { host: m[1]!.replace(/^\[|\]$/g, ''), port };
  }
  return { listen, onApi: bool(env, 'SANDBOXD_METRICS_ON_API', listen === null) };
}
