// bench/clients: the ways in that are not our TypeScript SDK, each against it on the same daemon
// in the same run (issue 33's figures):
//   1. an MCP `run_code` round trip (the MCP SDK's own client over Streamable HTTP at /mcp) vs our
//      SDK's runCode, the same sandbox, calls interleaved; p50 difference (goal ≤ +5 ms)
//   2. create → first command through the Python SDK (packages/python) vs the TypeScript SDK;
//      p50 ratio (goal ≤ 1.2×)
// Usage (root, after npm run build): node bench/dist/clients.js [CALLS=200] [CREATES=15]
import { performance } from 'node:perf_hooks';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Sandbox } from '@sandboxd/sdk';
import { startServer } from '../../e2e/dist/harness.js';
import { PKG, runAsync, testVenv } from '../../e2e/dist/python-venv.js';
import { row, summary } from './stats.js';

const CALLS = Number(process.argv[2] ?? 200);
const CREATES = Number(process.argv[3] ?? 15);

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

const python = testVenv();
const server = await startServer({ templates: ['base', 'code-interpreter'] });
try {
  const opts = { apiKey: server.apiKey, baseUrl: server.baseUrl };

  // 1. MCP run_code vs runCode.
  const sandbox = await Sandbox.create({ ...opts, template: 'code-interpreter', timeoutSeconds: 1800 });
  const mcp = new Client({ name: 'bench', version: '1.0.0' });
  await mcp.connect(new StreamableHTTPClientTransport(new URL(`${server.baseUrl}/mcp`), { requestInit: { headers: { 'x-api-key': server.apiKey } } }));
  const viaMcp = async () => {
    const r = (await mcp.callTool({ name: 'run_code', arguments: { sandbox_id: sandbox.id, code: '1' } })) as { isError?: boolean; content: Array<{ text?: string }> };
    if (r.isError) throw new Error(`run_code: ${r.content.map((c) => c.text).join(' ')}`);
  };
  const viaSdk = async () => {
    const r = await sandbox.runCode('1');
    if (r.exitCode !== 0) throw new Error(`runCode: ${r.stderr}`);
  };
  for (let i = 0; i < 20; i++) {
    await viaSdk();
    await viaMcp();
  }
  const sdkMs: number[] = [];
  const mcpMs: number[] = [];
  for (let i = 0; i < CALLS; i++) {
    sdkMs.push(await timed(viaSdk));
    mcpMs.push(await timed(viaMcp));
  }
  await mcp.close();
  await sandbox.kill();
  console.log(`run code '1' in a warm context, ${CALLS} calls each, interleaved`);
  console.log(row('our SDK runCode (baseline)', sdkMs));
  console.log(row('MCP run_code (/mcp)', mcpMs, sdkMs));
  const diff = summary(mcpMs).p50 - summary(sdkMs).p50;
  console.log(`MCP over the SDK, p50: +${diff.toFixed(1)} ms (goal ≤ +5 ms: ${diff <= 5 ? 'met' : 'MISSED'})`);

  // 2. Python vs TypeScript: create → first command.
  const ts: number[] = [];
  for (let i = 0; i < CREATES; i++) {
    const t0 = performance.now();
    const sb = await Sandbox.create({ ...opts, template: 'base' });
    const r = await sb.commands.run('true');
    ts.push(performance.now() - t0);
    if (r.exitCode !== 0) throw new Error('true failed');
    await sb.kill();
  }
  const script = [
    'import json, time',
    'from sandboxd import ApiClient, Sandbox',
    'out = []',
    'with ApiClient() as client:',
    `    for _ in range(${CREATES}):`,
    '        t0 = time.perf_counter()',
    '        sb = Sandbox.create("base", client=client)',
    '        assert sb.commands.run("true").exit_code == 0',
    '        out.append((time.perf_counter() - t0) * 1000)',
    '        sb.kill()',
    'print(json.dumps(out))',
  ].join('\n');
  const env = { ...process.env, SANDBOXD_API_URL: server.baseUrl, SANDBOXD_API_KEY: server.apiKey, PYTHONPATH: join(PKG, 'src') };
  const r = await runAsync(python, ['-c', script], env, 10 * 60_000);
  if (r.status !== 0) throw new Error(`python: ${r.out}`);
  // Both time create → command answered; each sandbox is deleted, untimed, before the next create.
  const py = JSON.parse(r.out.trim().split('\n').pop()!) as number[];
  console.log(`create → first command ('true'), ${CREATES} each (the TypeScript run first, then Python)`);
  console.log(row('TypeScript SDK (baseline)', ts));
  console.log(row('Python SDK', py, ts));
  const ratio = summary(py).p50 / summary(ts).p50;
  console.log(`Python over TypeScript, p50: ${ratio.toFixed(2)}× (goal ≤ 1.2×: ${ratio <= 1.2 ? 'met' : 'MISSED'})`);
} finally {
  await server.stop();
}
