import type { AgentClient } from './agent.js';
import { enc, type CallOptions } from './client.js';
import { deadlineFor } from './commands.js';
import type { CreateCodeContextOptions, RunCodeOptions } from './sandbox-options.js';
import type { BackgroundProcess, CodeContext, ExecutionResult, KernelSession } from './types.js';
import { stdinFields, toBackgroundProcess, toCodeContext, toExecutionResult, toKernelSession } from './wire.js';
import { streamExecute } from './ws.js';

/** The options of a run in the background (`runCodeBackground`, `runCodeAsync`). */
type BackgroundRunOptions = Omit<RunCodeOptions, 'onStdout' | 'onStderr' | 'rich'>;

export async function runCode(agent: AgentClient, code: string, options: RunCodeOptions): Promise<ExecutionResult> {
  const timeoutMs = options.requestTimeoutMs ?? deadlineFor(options.timeout, 60);
  const language = options.language ?? 'python';
  if (options.onStdout || options.onStderr) {
    return streamExecute(agent, {
      code,
      language,
      timeout: options.timeout,
      workingDir: options.workingDir,
      env: options.env,
      stdin: options.stdin,
      contextId: contextIdOf(options.context),
      isolated: options.isolated,
      onStdout: options.onStdout,
      onStderr: options.onStderr,
      signal: options.signal,
      timeoutMs,
    });
  }
  const body = await agent.http.json({
    method: 'POST',
    path: options.rich ? '/execute/rich' : '/execute',
    json: executeBody(code, language, options),
    signal: options.signal,
    timeoutMs,
    what: 'execute',
  });
  return toExecutionResult(body);
}

export function runCodeBackground(agent: AgentClient, code: string, options: BackgroundRunOptions & { name?: string }): Promise<BackgroundProcess> {
  const json = executeBody(code, options.language ?? 'python', options);
  if (options.name) json.name = options.name;
  return startExecution(agent, '/execute/background', json, options, 'start background execution');
}

export function runCodeAsync(
  agent: AgentClient,
  code: string,
  options: BackgroundRunOptions & { callbackUrl: string; callbackHeaders?: Record<string, string>; signatureSecret?: string },
): Promise<BackgroundProcess> {
  const json = executeBody(code, options.language ?? 'python', options);
  json.callback_url = options.callbackUrl;
  if (options.callbackHeaders) json.callback_headers = options.callbackHeaders;
  if (options.signatureSecret) json.callback_signature_secret = options.signatureSecret;
  return startExecution(agent, '/execute/async', json, options, 'start async execution');
}

async function startExecution(agent: AgentClient, path: string, json: Record<string, unknown>, options: CallOptions, what: string): Promise<BackgroundProcess> {
  const body = await agent.http.json({ method: 'POST', path, json, signal: options.signal, timeoutMs: options.requestTimeoutMs ?? 30_000, what });
  return toBackgroundProcess(body);
}

export async function createCodeContext(agent: AgentClient, options: CreateCodeContextOptions): Promise<CodeContext> {
  const json: Record<string, unknown> = { language: options.language ?? 'python' };
  if (options.cwd !== undefined) json.cwd = options.cwd;
  if (options.env !== undefined) json.env = options.env;
  const body = await agent.http.json({ method: 'POST', path: '/contexts', json, signal: options.signal, timeoutMs: options.requestTimeoutMs, what: 'create code context' });
  return toCodeContext(body);
}

export async function listCodeContexts(agent: AgentClient, options: CallOptions): Promise<CodeContext[]> {
  const body = (await agentGet(agent, '/contexts', options)) as { contexts?: unknown };
  return Array.isArray(body?.contexts) ? body.contexts.map(toCodeContext) : [];
}

export async function restartCodeContext(agent: AgentClient, context: string | CodeContext, options: CallOptions): Promise<CodeContext> {
  const id = contextIdOf(context)!;
  const body = await agent.http.json({ method: 'POST', path: `/contexts/${enc(id)}/restart`, signal: options.signal, timeoutMs: options.requestTimeoutMs, what: 'restart code context' });
  return toCodeContext(body);
}

export async function deleteCodeContext(agent: AgentClient, context: string | CodeContext, options: CallOptions): Promise<void> {
  const id = contextIdOf(context)!;
  await agent.http.json({ method: 'DELETE', path: `/contexts/${enc(id)}`, signal: options.signal, timeoutMs: options.requestTimeoutMs, what: 'delete code context' });
}

export async function listKernels(agent: AgentClient, options: CallOptions): Promise<KernelSession[]> {
  const body = (await agentGet(agent, '/jupyter/sessions', options)) as { sessions?: unknown };
  return Array.isArray(body?.sessions) ? body.sessions.map(toKernelSession) : [];
}

export function agentGet(agent: AgentClient, path: string, options: CallOptions): Promise<unknown> {
  return agent.http.json({ method: 'GET', path, signal: options.signal, timeoutMs: options.requestTimeoutMs, what: `GET ${path}` });
}

function executeBody(code: string, language: string, o: Omit<RunCodeOptions, 'onStdout' | 'onStderr'>): Record<string, unknown> {
  const json: Record<string, unknown> = { code, language };
  if (o.timeout !== undefined) json.timeout = o.timeout;
  if (o.workingDir !== undefined) json.working_dir = o.workingDir;
  if (o.env !== undefined) json.env = o.env;
  if (o.cache) json.cache = true;
  const context = contextIdOf(o.context);
  if (context !== undefined) json.context_id = context;
  if (o.isolated !== undefined) json.isolated = o.isolated;
  Object.assign(json, stdinFields(o.stdin));
  return json;
}

function contextIdOf(context: string | CodeContext | undefined): string | undefined {
  return typeof context === 'string' || context === undefined ? context : context.id;
}
