import { Sandbox } from '@sandboxd/sdk';
import { parseKeyValues, UsageError } from '../args.js';
import type { Command, Context } from '../command.js';
import { json } from '../output.js';

function printVars(ctx: Context, vars: Record<string, string>): void {
  if (ctx.json) ctx.out(json(vars));
  else
    ctx.out(
      Object.keys(vars)
        .sort()
        .map((k) => `${k}=${vars[k]}\n`)
        .join(''),
    );
}

export const env: Command = {
  name: 'env',
  summary: "show or change a sandbox's environment variables",
  args: 'ID [get KEY | set K=V... | rm KEY...]',
  details: 'Variables apply to every later run, exec and shell in the sandbox. `set` and `rm` print the resulting set.\n' + '`get` prints the value, or exits 1 if the variable is not set.',
  examples: ['sbx env $ID', 'sbx env $ID set API_URL=http://example DEBUG=1', 'sbx env $ID get DEBUG', 'sbx env $ID rm DEBUG'],
  options: {},
  minArgs: 1,
  maxArgs: Infinity,
  async run(ctx, { positionals }) {
    const [id, sub, ...rest] = positionals as [string, string | undefined, ...string[]];
    const sb = Sandbox.fromId(id, { client: ctx.client });
    const o = { signal: ctx.signal };
    switch (sub) {
      case undefined:
      case 'ls':
      case 'list':
        printVars(ctx, await sb.env.getAll(o));
        return 0;
      case 'get': {
        if (rest.length !== 1) throw new UsageError('env get takes one KEY', 'env');
        const vars = await sb.env.getAll(o);
        const key = rest[0]!;
        if (!(key in vars)) {
          if (ctx.json) ctx.out(json(null));
          else ctx.err(`sbx: ${key} is not set\n`);
          return 1;
        }
        ctx.out(ctx.json ? json(vars[key]) : `${vars[key]}\n`);
        return 0;
      }
      case 'set': {
        if (rest.length === 0) throw new UsageError('env set takes K=V pairs', 'env');
        printVars(ctx, await sb.env.update(parseKeyValues(rest, 'env set'), o));
        return 0;
      }
      case 'rm':
      case 'unset': {
        if (rest.length === 0) throw new UsageError('env rm takes one or more KEYs', 'env');
        let vars: Record<string, string> = {};
        for (const key of rest) vars = await sb.env.delete(key, o);
        printVars(ctx, vars);
        return 0;
      }
      default:
        throw new UsageError(`unknown env action ${JSON.stringify(sub)}; use get, set or rm`, 'env');
    }
  },
};
