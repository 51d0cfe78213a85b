import { join } from 'node:path';
import type { Agent, Route } from '../context.js';
import { exists, listDir, makeDir, parseMode, readFileForJson, remove, writeFileAtomic } from '../files/ops.js';
import { queryPath, resolvePath } from '../files/paths.js';
import { receiveUpload, sendFile } from '../files/transfer.js';
import { optionalBoolean, optionalString, requiredString } from '../http/validate.js';
import { ServiceError, type FileWriteResult } from '../proto.js';

function encodingOf(value: string | null | undefined, field: string): 'utf8' | 'base64' {
  if (value === undefined || value === null || value === '' || /^utf-?8$|^text$/i.test(value)) return 'utf8';
  if (/^base64$/i.test(value)) return 'base64';
  throw new ServiceError('VALIDATION_ERROR', `${field} must be "utf8" or "base64"`, { field });
}

export function fileRoutes(agent: Agent): Route[] {
  const ws = agent.config.workspaceDir;
  const pathFromBody = (body: Record<string, unknown>) => resolvePath(body.path ?? body.file_path, ws);
  const write = async (body: Record<string, unknown>): Promise<FileWriteResult> => {
    const path = pathFromBody(body);
    const content = requiredString(body, 'content', { allowEmpty: true, allowNul: true });
    const encoding = encodingOf(optionalString(body, 'encoding'), 'encoding');
    const data = encoding === 'base64' ? Buffer.from(content, 'base64') : Buffer.from(content, 'utf8');
    await writeFileAtomic(path, data, parseMode(body.mode), optionalBoolean(body, 'overwrite') ?? true);
    return { success: true, path, size: data.length };
  };
  return [
    {
      method: 'GET',
      path: '/files/read',
      handler: async (ctx) => {
        const path = queryPath(ctx.url, ws);
        const encoding = encodingOf(ctx.url.searchParams.get('encoding'), 'encoding');
        const { content, size } = await readFileForJson(path, agent.config.maxReadBytes, encoding);
        return { content, path, size, encoding };
      },
    },
    { method: 'POST', path: '/files/write', handler: async (ctx) => write(await ctx.body()) },
    { method: 'PUT', path: '/files/write', handler: async (ctx) => write(await ctx.body()) },
    { method: 'GET', path: '/files/list', handler: (ctx) => listDir(ctx.url.searchParams.has('path') ? queryPath(ctx.url, ws) : ws) },
    {
      method: 'GET',
      path: '/files/exists',
      handler: (ctx) => exists(queryPath(ctx.url, ws)),
    },
    {
      method: 'DELETE',
      path: '/files/remove',
      handler: async (ctx) => {
        const path = queryPath(ctx.url, ws);
        await remove(path);
        return { success: true, path, message: 'removed' };
      },
    },
    {
      method: 'POST',
      path: '/files/remove',
      handler: async (ctx) => {
        const path = pathFromBody(await ctx.body());
        await remove(path);
        return { success: true, path, message: 'removed' };
      },
    },
    {
      method: 'POST',
      path: '/files/mkdir',
      handler: async (ctx) => {
        const path = pathFromBody(await ctx.body());
        await makeDir(path);
        return { success: true, path, message: 'directory created' };
      },
    },
    {
      method: 'GET',
      path: '/files/download',
      handler: async (ctx) => {
        await sendFile(ctx.req, ctx.res, queryPath(ctx.url, ws));
        return undefined;
      },
    },
    {
      method: 'POST',
      path: '/files/upload',
      handler: (ctx) => receiveUpload(ctx.req, ctx.url, ws, join(agent.config.stateDir, 'uploads')),
    },
  ];
}
