import { randomBytes } from 'node:crypto';
import { ServiceError } from '../proto.js';
import { join } from 'node:path';
import { Kernel, type KernelCommand, type KernelState } from './kernel.js';
import { which } from './which.js';

/** The languages whose executions can keep state in a context. */
export const CONTEXT_LANGUAGES = ['python', 'javascript'] as const;
export type ContextLanguage = (typeof CONTEXT_LANGUAGES)[number];

/** Contexts one sandbox may hold (each can hold a live interpreter). */
export const MAX_CONTEXTS = 32;

export interface CodeContext {
  id: string;
  language: ContextLanguage;
  /** The directory its kernel starts in, and its executions' default working directory. */
  cwd: string;
  /** Variables set for this context only, over the sandbox's env. */
  env: Record<string, string>;
  /** The default context of its language (used when an execution names none). */
  isDefault: boolean;
  createdAt: Date;
  kernel: Kernel;
}

export interface ContextInfo {
  id: string;
  language: ContextLanguage;
  cwd: string;
  env_vars: Record<string, string>;
  default: boolean;
  kernel_id: string;
  state: KernelState;
  created_at: string;
}

export function isContextLanguage(l: string): l is ContextLanguage {
  return (CONTEXT_LANGUAGES as readonly string[]).includes(l);
}

/**
 * A sandbox's code contexts: each a persistent interpreter whose state lives between executions.
 * Nothing starts until an execution needs it; a context's kernel starts on its first cell.
 */
export class Contexts {
  private readonly byId = new Map<string, CodeContext>();

  constructor(
    private readonly agentDir: string,
    private readonly workspaceDir: string,
    /** The sandbox's env now (its PATH says where python3 and node are). */
    private readonly env: () => Record<string, string>,
    /** The agent's own Node, for JavaScript in an image without `node`. */
    private readonly nodeFallback: string[],
  ) {}

  private commandFor(language: ContextLanguage): KernelCommand {
    if (language === 'python') {
      return async () => {
        const python = (await which('python3', this.env().PATH)) ?? (await which('python', this.env().PATH));
        return python ? { argv: [python, join(this.agentDir, 'sbx_kernel.py')] } : { missing: 'python3' };
      };
    }
    return async () => {
      const node = await which('node', this.env().PATH);
      return { argv: [...(node ? [node] : this.nodeFallback), join(this.agentDir, 'sbx_kernel_js.cjs')] };
    };
  }

  create(o: { language: ContextLanguage; cwd?: string; env?: Record<string, string> }, isDefault = false): CodeContext {
    // Default contexts do not count: a sandbox full of its own contexts can still run plain code.
    if (!isDefault && [...this.byId.values()].filter((c) => !c.isDefault).length >= MAX_CONTEXTS) {
      throw new ServiceError('CONTEXT_LIMIT', `a sandbox holds at most ${MAX_CONTEXTS} contexts; delete one first (DELETE /contexts/{id})`, {
        limit: MAX_CONTEXTS,
      });
    }
    const cwd = o.cwd ?? this.workspaceDir;
    const ctx: CodeContext = {
      id: `ctx_${randomBytes(8).toString('hex')}`,
      language: o.language,
      cwd,
      env: o.env ?? {},
      isDefault,
      createdAt: new Date(),
      kernel: new Kernel(this.commandFor(o.language)),
    };
    this.byId.set(ctx.id, ctx);
    return ctx;
  }

  get(id: string): CodeContext {
    const ctx = this.byId.get(id);
    if (!ctx) throw new ServiceError('CONTEXT_NOT_FOUND', `Context not found: ${id}`, { context_id: id });
    return ctx;
  }

  /** The default context of a language, made on first use. */
  defaultFor(language: ContextLanguage): CodeContext {
    for (const c of this.byId.values()) if (c.isDefault && c.language === language) return c;
    return this.create({ language }, true);
  }

  list(): CodeContext[] {
    return [...this.byId.values()];
  }

  restart(id: string): CodeContext {
    const ctx = this.get(id);
    ctx.kernel.restart();
    return ctx;
  }

  delete(id: string): void {
    const ctx = this.get(id);
    ctx.kernel.close();
    this.byId.delete(id);
  }

  stopAll(): void {
    for (const c of this.byId.values()) c.kernel.close();
  }
}

export function contextInfo(c: CodeContext): ContextInfo {
  return {
    id: c.id,
    language: c.language,
    cwd: c.cwd,
    env_vars: c.env,
    default: c.isDefault,
    kernel_id: c.kernel.id,
    state: c.kernel.state,
    created_at: c.createdAt.toISOString(),
  };
}
