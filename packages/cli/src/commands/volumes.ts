import { Volume, type VolumeMountOptions } from '@sandboxd/sdk';
import { parsePositiveInt, UsageError } from '../args.js';
import type { Command } from '../command.js';
import { bytes, json, keyValues, relativeTime, table } from '../output.js';

/** `--volume NAME:/path[:ro]` of `sbx create`. */
export function parseVolumeMounts(specs: string[] | undefined): VolumeMountOptions[] | undefined {
  if (!specs?.length) return undefined;
  return specs.map((s) => {
    const m = /^([^:]+):(\/[^:]*)(?::(ro|rw))?$/.exec(s);
    if (!m) throw new UsageError(`--volume takes NAME:/path or NAME:/path:ro, not ${JSON.stringify(s)}`, 'create');
    return { volume: m[1]!, path: m[2]!, ...(m[3] === 'ro' ? { readOnly: true } : {}) };
  });
}

export const volumeCreate: Command = {
  name: 'volume create',
  summary: 'create a volume that sandboxes share and that outlives them',
  args: 'NAME',
  details:
    'A filesystem of --size GB (a hard limit: writes past it fail with "No space left on device" inside), counted in\n' +
    "the organization's disk quota. Mount it with `sbx create --volume NAME:/path` (any number of sandboxes at once).",
  examples: ['sbx volume create datasets --size 10', 'sbx create --volume datasets:/data', 'sbx create --volume datasets:/data:ro'],
  options: {
    size: { type: 'string', value: 'GB', help: 'its size in GB (required)' },
  },
  minArgs: 1,
  maxArgs: 1,
  async run(ctx, { positionals, values }) {
    if (values.size === undefined) throw new UsageError('--size GB is required', 'volume create');
    const v = await Volume.create(positionals[0]!, parsePositiveInt(values.size as string, '--size'), { client: ctx.client, signal: ctx.signal });
    ctx.out(ctx.json ? json(v) : v.id + '\n');
    return 0;
  },
};

export const volumeLs: Command = {
  name: 'volume ls',
  summary: 'list volumes',
  args: '',
  options: { quiet: { type: 'boolean', short: 'q', help: 'print only the volume names' } },
  minArgs: 0,
  maxArgs: 0,
  async run(ctx, { values }) {
    const list = await Volume.list({ client: ctx.client, signal: ctx.signal });
    if (ctx.json) ctx.out(json(list));
    else if (values.quiet) ctx.out(list.map((v) => v.name + '\n').join(''));
    else if (list.length === 0) ctx.err('no volumes\n');
    else ctx.out(table(['NAME', 'ID', 'SIZE', 'MOUNTED BY', 'CREATED'], list.map((v) => [v.name, v.id, `${v.sizeGb} GB`, v.mountedBy.join(',') || '-', relativeTime(v.createdAt)])));
    return 0;
  },
};

export const volumeGet: Command = {
  name: 'volume get',
  summary: 'show a volume and what it holds',
  args: 'NAME',
  options: {},
  minArgs: 1,
  maxArgs: 1,
  async run(ctx, { positionals }) {
    const v = await Volume.get(positionals[0]!, { client: ctx.client, signal: ctx.signal });
    ctx.out(
      ctx.json
        ? json(v)
        : keyValues([
            ['name', v.name],
            ['id', v.id],
            ['size', `${v.sizeGb} GB`],
            ['used', v.usedBytes !== undefined ? bytes(v.usedBytes) : '-'],
            ['mounted by', v.mountedBy.join(', ') || '-'],
            ['node', v.node ?? '-'],
            ['created', `${v.createdAt} (${relativeTime(v.createdAt)})`],
          ]),
    );
    return 0;
  },
};

export const volumeRm: Command = {
  name: 'volume rm',
  summary: 'delete volumes and their files',
  args: 'NAME...',
  details: 'A volume a sandbox mounts is refused; --force deletes those sandboxes first.',
  options: { force: { type: 'boolean', short: 'f', help: 'delete the sandboxes that mount it first' } },
  minArgs: 1,
  maxArgs: Infinity,
  async run(ctx, { positionals, values }) {
    const results: Array<{ id: string; status: string }> = [];
    let failed = false;
    for (const name of positionals) {
      try {
        results.push(await Volume.delete(name, { client: ctx.client, signal: ctx.signal, force: values.force === true }));
        if (!ctx.json) ctx.out(`${name} deleted\n`);
      } catch (err) {
        if (positionals.length === 1) throw err;
        failed = true;
        ctx.err(`sbx: ${name}: ${err instanceof Error ? err.message : String(err)}\n`);
      }
    }
    if (ctx.json) ctx.out(json(positionals.length === 1 ? results[0] : results));
    return failed ? 1 : 0;
  },
};
