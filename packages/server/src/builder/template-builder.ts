import { randomBytes } from 'node:crypto';
import type { BaseImageResolver } from '../images/base-images.js';
import { runTool } from '../runtime/proc.js';
import { sha256Hex, type FsLayerStore, type Log } from '../images/layer-store.js';
import type { LayerInfo } from '../images/types.js';
import type { Runtime, SandboxResources } from '../runtime/types.js';
import type { BuildEngine, BuildEngineHooks, BuildEngineInput, BuildEngineResult, CopyInput } from './types.js';
import type { BuildStep } from './types.js';
import { BuildCache, orgRootKey, stepKey } from './cache.js';
import { stageCopyInputs } from './inputs.js';
import { STEP_INPUT_DIR, aptArgv, copyArgv, runArgv } from './scripts.js';

export interface TemplateBuilderDeps {
  runtime: Pick<Runtime, 'runStep'>;
  layers: FsLayerStore;
  bases: BaseImageResolver;
  cache: BuildCache;
  /** Where a COPY step's inputs are staged for its container (see inputs.ts). */
  inputsDir: string;
  /** Per step; a step that runs longer fails the build. */
  stepTimeoutMs?: number;
  pidsMax?: number;
}

export interface BuildInput {
  /** The organization the build is for: its cache entries and step layers are its own. */
  orgId: string;
  steps: BuildStep[];
  cpu: number;
  memoryMb: number;
  diskGb: number;
  skipCache: boolean;
  /** Resolved COPY inputs by step index. */
  copies?: Map<number, CopyInput[]>;
  /** Unique per build: names step containers and the layers of a skipCache build. */
  buildId?: string;
}

export interface BuildHooks {
  onLog?: Log;
  /** percent 0-100 and a short description of the current step. */
  onProgress?: (percent: number, currentStep: string) => void;
  signal?: AbortSignal;
  /** Before a step is run (not a cached one); a throw fails the build before the step writes anything. */
  onBeforeStep?: () => Promise<void>;
}

export interface BuildOutput {
  /** Top-most first, base image layers included. */
  layers: LayerInfo[];
  env: Record<string, string>;
  workdir: string | null;
  /** Cache key of the last step: equal keys mean equal templates. */
  key: string;
  /** How many layer-making steps came from the cache / were run. */
  cached: number;
  built: number;
}

/**
 * Template steps → cached layers. The `from` image comes from the base-image resolver; `apt`,
 * `run` and `copy` each run in a throwaway container (`runtime.runStep`, sandbox isolation) whose
 * upper directory becomes the step's layer; `env` and `workdir` only change metadata (and the keys
 * of later steps). A step whose key is cached is not run again, unless `skipCache`.
 */
export class TemplateBuilder implements BuildEngine {
  constructor(private readonly deps: TemplateBuilderDeps) {}

  /** The service's BuildEngine interface. */
  async run(input: BuildEngineInput, hooks: BuildEngineHooks): Promise<BuildEngineResult> {
    const out = await this.build(
      {
        orgId: input.orgId,
        steps: input.steps,
        cpu: input.resources.vcpu,
        memoryMb: input.resources.memoryMb,
        diskGb: input.resources.diskGb,
        skipCache: input.skipCache,
        copies: input.copies,
        buildId: input.buildId,
      },
      { onLog: hooks.log, onProgress: hooks.progress, signal: hooks.signal, ...(hooks.beforeStep ? { onBeforeStep: () => hooks.beforeStep!() } : {}) },
    );
    return { layerIds: out.layers.map((l) => l.id), env: out.env, workdir: out.workdir };
  }

  async build(input: BuildInput, hooks: BuildHooks = {}): Promise<BuildOutput> {
    const log = hooks.onLog ?? (() => undefined);
    const progress = hooks.onProgress ?? (() => undefined);
    const signal = hooks.signal;
    const steps = input.steps;
    const first = steps[0];
    if (!first || first.type !== 'from') throw new Error('the first step must be a from step');
    const nonce = input.buildId ?? randomBytes(8).toString('hex');
    const total = steps.length;
    const started = Date.now();

    progress(0, `from ${first.image}`);
    log(`[1/${total}] FROM ${first.image}`);
    const base = await this.deps.bases.resolve(first.image, log, signal);
    log(`[1/${total}] base ${base.ref}: ${base.source}, ${base.layers.length} layer(s)`);
    let key = orgRootKey(base.key, input.orgId);
    const env: Record<string, string> = { ...base.env };
    let workdir = base.workdir;
    const built: LayerInfo[] = [];
    let cached = 0;
    let ran = 0;
    // A workdir set after the last layer-making step must still exist in the image.
    let workdirPending = false;

    for (let i = 1; i < total; i++) {
      signal?.throwIfAborted();
      const step = steps[i]!;
      const copies = input.copies?.get(i) ?? [];
      const label = describe(step);
      const tag = `[${i + 1}/${total}]`;
      progress((i / total) * 100, label);
      key = stepKey(key, step, copies);
      if (step.type === 'env') {
        env[step.key] = step.value;
        log(`${tag} ${label}`);
        continue;
      }
      if (step.type === 'workdir') {
        workdir = step.path;
        workdirPending = true;
        log(`${tag} ${label}`);
        continue;
      }
      if (step.type === 'from') throw new Error(`step ${i + 1}: only the first step may be a from step`);
      const lowers = [...built].reverse().concat(base.layers);
      const argv =
        step.type === 'run' ? runArgv(step.command, workdir) : step.type === 'apt' ? aptArgv(step.packages) : copyArgv(step, copies, workdir);
      const inputs = step.type === 'copy' ? copies : [];
      const layer = await this.layerFor(key, input, nonce, { tag, label, lowers, argv, inputs, env, log, signal, beforeStep: hooks.onBeforeStep }, () => cached++, () => ran++);
      built.push(layer);
      workdirPending = false;
    }

    if (workdirPending && workdir) {
      key = stepKey(key, { type: 'run', command: `mkdir -p ${workdir}` });
      const lowers = [...built].reverse().concat(base.layers);
      const layer = await this.layerFor(
        key,
        input,
        nonce,
        { tag: `[${total}/${total}]`, label: `create workdir ${workdir}`, lowers, argv: ['/bin/sh', '-c', 'mkdir -p -- "$0"', workdir], inputs: [], env, log, signal, beforeStep: hooks.onBeforeStep },
        () => cached++,
        () => ran++,
      );
      built.push(layer);
    }

    const layers = [...built].reverse().concat(base.layers);
    log(`build done in ${((Date.now() - started) / 1000).toFixed(1)} s: ${layers.length} layers (${cached} step(s) cached, ${ran} run)`);
    progress(100, 'done');
    return { layers, env, workdir, key, cached, built: ran };
  }

  private async layerFor(
    key: string,
    input: BuildInput,
    nonce: string,
    s: {
      tag: string;
      label: string;
      lowers: LayerInfo[];
      argv: string[];
      /** COPY inputs, bind-mounted at STEP_INPUT_DIR/<index>. */
      inputs: CopyInput[];
      env: Record<string, string>;
      log: Log;
      signal?: AbortSignal;
      beforeStep?: () => Promise<void>;
    },
    onCached: () => void,
    onRun: () => void,
  ): Promise<LayerInfo> {
    const { layers, cache } = this.deps;
    if (!input.skipCache) {
      // A layer named by the key is that step's result too (e.g. the cache index was lost).
      const hit = (await cache.get(key)) ?? key;
      if (await layers.has(hit)) {
        s.log(`${s.tag} ${s.label} (cached)`);
        onCached();
        return layers.info(hit);
      }
    }
    // Normally the layer is named by its key; a skipCache build never overwrites a layer that
    // sandboxes may have mounted, so it makes a new one and repoints the cache.
    const id = input.skipCache ? sha256Hex(`${key}\n${nonce}`) : key;
    await s.beforeStep?.();
    s.log(`${s.tag} ${s.label}`);
    const t0 = Date.now();
    const resources: SandboxResources = {
      vcpu: input.cpu,
      memoryMb: input.memoryMb,
      diskGb: input.diskGb,
      pidsMax: this.deps.pidsMax ?? 4096,
    };
    const layer = await layers.ensureLayer(
      id,
      async (tree) => {
        const stepId = `b-${nonce.replace(/[^a-z0-9]/g, '').slice(-12)}-${id.slice(0, 12)}`;
        const staged = s.inputs.length > 0 ? await stageCopyInputs(this.deps.inputsDir, s.inputs) : undefined;
        const binds = (staged?.paths ?? []).map((source, j) => ({ source, target: `${STEP_INPUT_DIR}/${j}` }));
        const res = await this.deps.runtime.runStep({
          id: stepId,
          lowerDirs: s.lowers.map((l) => l.path),
          upperDir: tree,
          argv: s.argv,
          // Docker's default; not part of the template's env.
          env: { HOME: '/root', ...s.env },
          cwd: '/',
          internetAccess: true,
          resources,
          timeoutMs: this.deps.stepTimeoutMs ?? 30 * 60_000,
          binds,
          onOutput: lineSplitter((line) => s.log(`  ${line}`)),
          signal: s.signal,
        }).finally(() => staged?.cleanup());
        if (res.timedOut) throw new Error(`${s.tag} ${s.label} failed: timed out after ${Math.round((this.deps.stepTimeoutMs ?? 1_800_000) / 1000)} s`);
        if (res.exitCode !== 0) throw new Error(`${s.tag} ${s.label} failed: exit status ${res.exitCode}`);
        const size = await treeSize(tree);
        return { kind: 'step', sizeBytes: size.bytes, entries: size.entries, extra: { step: s.label, cacheKey: key } };
      },
      s.log,
      { signal: s.signal },
    );
    await cache.set(key, layer.id);
    onRun();
    const meta = await layers.meta(layer.id);
    s.log(`${s.tag} done in ${((Date.now() - t0) / 1000).toFixed(1)} s (${((meta?.sizeBytes ?? 0) / 1e6).toFixed(1)} MB)`);
    return layer;
  }
}

function describe(step: BuildStep): string {
  const short = (s: string) => (s.length > 120 ? `${s.slice(0, 117)}...` : s).replace(/\s*\n\s*/g, ' ⏎ ');
  switch (step.type) {
    case 'from':
      return `FROM ${step.image}`;
    case 'apt':
      return `APT ${step.packages.join(' ')}`;
    case 'run':
      return `RUN ${short(step.command)}`;
    case 'copy':
      return `COPY ${[...step.srcPaths, ...step.fileIds].join(' ') || step.filesHash || ''} ${step.dest}`;
    case 'env':
      return `ENV ${step.key}=${short(step.value)}`;
    case 'workdir':
      return `WORKDIR ${step.path}`;
  }
}

/** dpkg's and apt's carriage-return progress counters: hundreds of lines that say nothing. */
const PROGRESS_NOISE = /^\(Reading database \.\.\. (\d+%)?\s*$|^\s*\d+% \[[^\]]*\]\s*$/;

function lineSplitter(onLine: (line: string) => void): (chunk: string) => void {
  let buf = '';
  return (chunk) => {
    buf += chunk;
    const parts = buf.split(/\r?\n|\r/);
    buf = parts.pop() ?? '';
    for (const p of parts) if (p.trim() && !PROGRESS_NOISE.test(p)) onLine(p.trimEnd());
    if (buf.length > 8192) {
      onLine(buf);
      buf = '';
    }
  };
}

/**
 * Entries and bytes of regular files of a tree a step wrote. Counted by find(1), line by line: a
 * step can leave millions of files in one directory (a 125 GB disk has 8 M inodes), and reading
 * such a directory at once took ~200 bytes of the daemon's heap per entry (1.2 M files: +240 MB).
 */
async function treeSize(dir: string): Promise<{ entries: number; bytes: number }> {
  let entries = 0;
  let bytes = 0;
  await runTool('find', [dir, '-mindepth', '1', '-printf', '%y %s\n'], {
    onLine: (line) => {
      entries++;
      if (line.startsWith('f ')) bytes += Number(line.slice(2)) || 0;
    },
  });
  return { entries, bytes };
}
