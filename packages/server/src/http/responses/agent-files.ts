import { Type } from '@sinclair/typebox';
import {
  FileDoneResponse,
  FileExistsResponse,
  FileListResponse,
  FileReadResponse,
  FileWrittenResponse,
  WatchClientFrame,
  WatchServerFrame,
} from '@sandboxd/protocol';
import type { SuccessDoc } from '../api-doc-types.js';
import { json, jsonRequest, BINARY } from './payloads.js';
import { AT, LATER } from './examples.js';

/** The agent's files: read, write, list, upload, download, watch. Keyed without the /agent prefix. */
export const AGENT_FILE_RESPONSES: Record<string, SuccessDoc> = {
  'GET /files/read': { status: 200, description: 'the file content', content: json(FileReadResponse, { content: 'print("hello")\n', path: '/workspace/hello.py', size: 15, encoding: 'utf8' }) },
  'POST /files/write': {
    status: 200,
    description: 'written',
    content: json(FileWrittenResponse, { success: true, path: '/workspace/hello.py', size: 15 }),
    request: jsonRequest({ path: '/workspace/hello.py', content: 'print("hello")\n', mode: '0644' }),
  },
  'GET /files/list': {
    status: 200,
    description: "the directory's entries",
    content: json(FileListResponse, {
      files: [
        { name: 'data', path: '/workspace/data', size: 0, is_dir: true, is_directory: true, is_file: false, is_symlink: false, permissions: 'drwxr-xr-x', mode: '0755', modified: AT, modified_time: AT },
        { name: 'hello.py', path: '/workspace/hello.py', size: 15, is_dir: false, is_directory: false, is_file: true, is_symlink: false, permissions: '-rw-r--r--', mode: '0644', modified: LATER, modified_time: LATER },
      ],
      path: '/workspace',
      count: 2,
    }),
  },
  'POST /files/upload': {
    status: 200,
    description: 'stored at path (a directory path keeps the file name)',
    content: json(FileWrittenResponse, { success: true, path: '/workspace/data/sales.csv', size: 1_048_576 }),
    request: {
      content: {
        'multipart/form-data': {
          schema: Type.Object({
            file: Type.String({ format: 'binary', description: 'the bytes (one file part)' }),
            path: Type.Optional(Type.String({ description: 'where to put it (or ?path=); a directory keeps the file name' })),
            mode: Type.Optional(Type.String({ description: 'octal file mode, e.g. 0644' })),
          }),
        },
        'application/octet-stream': { schema: Type.String({ format: 'binary', description: 'the raw bytes, with ?path=' }) },
      },
    },
  },
  'GET /files/download': {
    status: 200,
    description: "the file's bytes, streamed, with a Content-Type from its name (application/octet-stream when unknown) and Content-Disposition: attachment",
    content: { '*/*': { schema: BINARY, example: 'print("hello")\n' } },
    more: [{ status: 206, description: 'a Range request (one range): those bytes, with Content-Range', content: { '*/*': { schema: BINARY, example: 'hello' } } }],
  },
  'GET /files/exists': {
    status: 200,
    description: 'whether it exists (false is a 200 too)',
    content: {
      'application/json': {
        schema: FileExistsResponse,
        examples: {
          file: { summary: 'a file', value: { exists: true, path: '/workspace/hello.py', is_dir: false, is_file: true, size: 15 } },
          missing: { summary: 'nothing there', value: { exists: false, path: '/workspace/nope.txt' } },
        },
      },
    },
  },
  'DELETE /files/remove': { status: 200, description: 'removed', content: json(FileDoneResponse, { success: true, path: '/workspace/data', message: 'removed' }) },
  'POST /files/mkdir': {
    status: 200,
    description: 'made (with its parents)',
    content: json(FileDoneResponse, { success: true, path: '/workspace/out/plots', message: 'directory created' }),
    request: jsonRequest({ path: '/workspace/out/plots' }),
  },
  'GET /files/watch': {
    status: 101,
    description: 'Switching Protocols: the connection is a WebSocket. Send a watch frame (or give ?path=); one change frame comes per change below the directory, new subdirectories included.',
    frames: {
      client: { schema: WatchClientFrame, example: { action: 'watch', path: '/workspace', ack: true } },
      server: {
        schema: WatchServerFrame,
        examples: {
          watching: { summary: 'with ack: the whole tree is watched', value: { type: 'watching', path: '/workspace', timestamp: AT } },
          change: { summary: 'a change', value: { type: 'change', event: 'modified', path: '/workspace/hello.py', is_dir: false, timestamp: LATER } },
          renamed: { summary: 'a rename', value: { type: 'change', event: 'renamed', path: '/workspace/new.py', old_path: '/workspace/hello.py', is_dir: false, timestamp: LATER } },
        },
      },
    },
  },
};
