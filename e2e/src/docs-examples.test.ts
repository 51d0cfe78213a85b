import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { chmodSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { REPO_ROOT, startServer, type TestServer } from './harness.js';
import { CLI_MAIN } from './sdk-support.js';

/**
 * Runs the examples of docs/sdk.md and docs/cli.md that are marked `<!-- test -->` against a real
 * server, so the documentation cannot rot: TypeScript examples are type-checked against the SDK's
 * declarations and then run; shell examples run under `bash -euo pipefail` with `sbx` on the PATH.
 * TypeScript examples marked `<!-- typecheck -->` (slow or side-effecting ones) are only type-checked.
 */

export interface Example {
  file: string;
  lang: 'ts' | 'sh';
  heading: string;
  line: number;
  code: string;
  /** false for `<!-- typecheck -->` examples. */
  run: boolean;
}

export function extractExamples(file: string, markdown: string): Example[] {
  const out: Example[] = [];
  const lines = markdown.split('\n');
  let heading = '';
  for (let i = 0; i < lines.length; i++) {
    const h = /^#{1,6}\s+(.*)$/.exec(lines[i]!);
    if (h) heading = h[1]!;
    const marker = lines[i]!.trim();
    if (marker !== '<!-- test -->' && marker !== '<!-- typecheck -->') continue;
    const fence = /^```(ts|typescript|sh|bash)\s*$/.exec(lines[i + 1] ?? '');
    if (!fence) throw new Error(`${file}:${i + 1}: ${marker} must be followed by a \`\`\`ts or \`\`\`sh block`);
    const end = lines.indexOf('```', i + 2);
    if (end === -1) throw new Error(`${file}:${i + 2}: unterminated code block`);
    const lang = fence[1]!.startsWith('t') ? 'ts' : 'sh';
    if (lang === 'sh' && marker !== '<!-- test -->') throw new Error(`${file}:${i + 1}: shell examples can only be run (<!-- test -->)`);
    out.push({ file, lang, heading, line: i + 2, code: lines.slice(i + 2, end).join('\n') + '\n', run: marker === '<!-- test -->' });
    i = end;
  }
  return out;
}

const DOCS = ['docs/sdk.md', 'docs/cli.md'];
const examples = DOCS.flatMap((f) => extractExamples(f, readFileSync(join(REPO_ROOT, f), 'utf8')));
// Inside the repo so that `@sandboxd/sdk` resolves through the workspace's node_modules.
const workDir = join(REPO_ROOT, 'e2e/dist/docs-examples');

let server: TestServer;

before(async () => {
  rmSync(workDir, { recursive: true, force: true });
  mkdirSync(join(workDir, 'bin'), { recursive: true });
  writeFileSync(join(workDir, 'bin/sbx'), `#!/bin/sh\nexec "${process.execPath}" "${CLI_MAIN}" "$@"\n`);
  chmodSync(join(workDir, 'bin/sbx'), 0o755);
  writeFileSync(join(workDir, 'package.json'), JSON.stringify({ type: 'module', private: true }));
  server = await startServer();
});
after(async () => {
  await server?.stop();
  rmSync(workDir, { recursive: true, force: true });
});

function run(cmd: string, args: string[], timeoutMs: number): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, {
      cwd: workDir,
      env: {
        ...process.env,
        SANDBOXD_API_URL: server.baseUrl,
        SANDBOXD_API_KEY: server.apiKey,
        PATH: `${join(workDir, 'bin')}:${process.env.PATH}`,
        NO_PROXY: '127.0.0.1,localhost',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, out });
    });
  });
}

const name = (e: Example) => `${e.file}:${e.line} (${e.heading}, ${e.lang})`;

describe('documentation examples', () => {
  test('the docs have runnable examples of both kinds', () => {
    assert.ok(examples.filter((e) => e.lang === 'ts' && e.run).length >= 5, 'sdk.md examples');
    assert.ok(examples.filter((e) => e.lang === 'sh').length >= 5, 'cli.md examples');
  });

  test('every TypeScript example type-checks against the SDK', () => {
    const files = examples
      .filter((e) => e.lang === 'ts')
      .map((e, i) => {
        const path = join(workDir, `example-${i}.ts`);
        writeFileSync(path, `// ${name(e)}\n${e.code}export {};\n`);
        return { path, e };
      });
    const program = ts.createProgram(
      files.map((f) => f.path),
      {
        strict: true,
        noEmit: true,
        target: ts.ScriptTarget.ES2022,
        module: ts.ModuleKind.NodeNext,
        moduleResolution: ts.ModuleResolutionKind.NodeNext,
        types: ['node'],
        skipLibCheck: true,
      },
    );
    const problems = ts.getPreEmitDiagnostics(program).map((d) => {
      const where = d.file ? `${d.file.fileName.split('/').pop()}:${d.file.getLineAndCharacterOfPosition(d.start ?? 0).line}` : '';
      return `${where} ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`;
    });
    assert.deepEqual(problems, []);
  });

  for (const [i, e] of examples.entries()) {
    if (!e.run) continue;
    test(`runs ${name(e)}`, async () => {
      let r;
      if (e.lang === 'ts') {
        const js = ts.transpileModule(e.code, { compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext } }).outputText;
        const path = join(workDir, `run-${i}.mjs`);
        writeFileSync(path, js);
        r = await run(process.execPath, [path], 600_000);
      } else {
        const path = join(workDir, `run-${i}.sh`);
        writeFileSync(path, e.code);
        r = await run('bash', ['-euo', 'pipefail', path], 600_000);
      }
      assert.equal(r.code, 0, `${name(e)} failed:\n${r.out}`);
    });
  }
});
