import { Sandbox } from '@sandboxd/sdk';
import { UsageError } from '../args.js';
import type { Context } from '../command.js';
import { json } from '../output.js';

/** `sbx logs SANDBOX_ID PROCESS_ID`: a background process's output (stdout here, stderr to stderr). */
export async function processLogs(ctx: Context, sandboxId: string, processId: string, values: Record<string, unknown>): Promise<number> {
  const sinceText = values.since as string | undefined;
  if (sinceText !== undefined && !/^\d+$/.test(sinceText)) throw new UsageError('--since takes an offset: a whole number of bytes (the next offset of an earlier read)', 'logs');
  const since = sinceText === undefined ? 0 : Number(sinceText);
  const sb = await Sandbox.connect(sandboxId, { client: ctx.client, signal: ctx.signal });
  const lost = (bytes: number) => ctx.err(`[sbx] ${bytes} bytes of output were dropped before they were read (each stream keeps its last part)\n`);

  if (!values.follow) {
    // Everything kept from the offset up to now, in as many reads as it takes.
    const first = await sb.processes.output(processId, { since, signal: ctx.signal });
    let out = first;
    const chunks = [...first.chunks];
    let lostBytes = first.lostBytes;
    while (out.nextOffset < first.endOffset) {
      out = await sb.processes.output(processId, { since: out.nextOffset, signal: ctx.signal });
      if (out.chunks.length === 0 && out.lostBytes === 0) break;
      chunks.push(...out.chunks);
      lostBytes += out.lostBytes;
    }
    if (ctx.json) {
      ctx.out(json({ ...out, since, chunks, lostBytes, text: chunks.map((c) => c.data).join('') }));
      return 0;
    }
    if (lostBytes > 0) lost(lostBytes);
    for (const c of chunks) (c.stream === 'stderr' ? ctx.err : ctx.out)(c.data);
    ctx.err(`[sbx] process ${processId}: ${out.status}${out.exitCode === null ? '' : ` (exit ${out.exitCode})`}; next offset ${out.nextOffset}\n`);
    return 0;
  }

  const attached = sb.processes.attach(processId, { since, signal: ctx.signal });
  for await (const e of attached) {
    if (ctx.json) ctx.out(JSON.stringify(e) + '\n');
    else if (e.type === 'lost') lost(e.bytes);
    else (e.type === 'stderr' ? ctx.err : ctx.out)(e.data);
  }
  const exit = await attached.wait();
  if (ctx.json) ctx.out(JSON.stringify({ type: 'exit', ...exit }) + '\n');
  else ctx.err(`[sbx] process ${processId}: ${exit.status}${exit.exitCode === null ? '' : ` (exit ${exit.exitCode})`}; next offset ${exit.nextOffset}\n`);
  return exit.status === 'completed' ? 0 : 1;
}
