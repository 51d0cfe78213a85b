import { Sandbox, type NetworkPolicy } from '@sandboxd/sdk';
import { UsageError } from '../args.js';
import type { Command } from '../command.js';
import { json, keyValues } from '../output.js';

function describePolicy(p: NetworkPolicy): string {
  return keyValues([
    ['internet', p.internetAccess ? 'yes' : 'no'],
    ['allow out', p.allowOut.length ? p.allowOut.join(', ') : '-'],
    ['deny out', p.denyOut.length ? p.denyOut.join(', ') : '-'],
  ]);
}

export const network: Command = {
  name: 'network',
  summary: "show or replace a sandbox's egress rules",
  args: 'ID',
  details:
    'Without options it prints the rules. With them it replaces the rules as a whole: the lists given are the\n' +
    'new lists, a list not given is emptied, and internet access is on unless --no-internet. So a change names\n' +
    'every entry to keep, or --clear to empty both lists. Entries: an IPv4 address, a CIDR, a domain or *.domain;\n' +
    'a domain opens HTTP and HTTPS to that name only. Deny wins over allow; with an allow list, everything else\n' +
    'is refused, at once (a reset, not a hang). The host, private ranges, metadata addresses and other sandboxes\n' +
    'stay closed whatever the rules say. A change applies to new connections within a second.',
  examples: [
    'sbx network $ID',
    'sbx network $ID --allow-out pypi.org --allow-out files.pythonhosted.org --allow-out 10.20.0.0/16',
    'sbx network $ID --deny-out ads.example.com --deny-out "*.tracker.example"',
    'sbx network $ID --clear',
    'sbx network $ID --no-internet --clear',
  ],
  options: {
    'allow-out': { type: 'string', multiple: true, value: 'ENTRY', help: 'reach only these (repeatable)' },
    'deny-out': { type: 'string', multiple: true, value: 'ENTRY', help: 'never reach this, even when allowed (repeatable)' },
    clear: { type: 'boolean', help: 'empty both lists' },
    internet: { type: 'boolean', help: 'connections may leave the sandbox (the default; not for one created without it)' },
    'no-internet': { type: 'boolean', help: 'no connection leaves the sandbox' },
  },
  minArgs: 1,
  maxArgs: 1,
  async run(ctx, { positionals, values }) {
    const allowOut = values['allow-out'] as string[] | undefined;
    const denyOut = values['deny-out'] as string[] | undefined;
    const internet = values.internet === true;
    const noInternet = values['no-internet'] === true;
    if (internet && noInternet) throw new UsageError('--internet and --no-internet exclude each other', 'network');
    if (values.clear && (allowOut || denyOut)) throw new UsageError('--clear excludes --allow-out and --deny-out', 'network');
    const sb = Sandbox.fromId(positionals[0]!, { client: ctx.client });
    let policy: NetworkPolicy;
    if (!allowOut && !denyOut && !values.clear && !internet && !noInternet) {
      policy = await sb.getNetwork({ signal: ctx.signal });
    } else {
      // The rules are replaced as a whole: refuse to empty the lists unless that is what was asked.
      if (!allowOut && !denyOut && !values.clear) {
        throw new UsageError('this replaces the whole policy: give the --allow-out and --deny-out entries to keep, or --clear to empty both lists', 'network');
      }
      policy = await sb.setNetwork(
        { internetAccess: internet ? true : noInternet ? false : undefined, allowOut: allowOut ?? [], denyOut: denyOut ?? [] },
        { signal: ctx.signal },
      );
    }
    ctx.out(ctx.json ? json(policy) : describePolicy(policy));
    return 0;
  },
};
