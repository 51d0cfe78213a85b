import {
  BuildDoneEvent,
  BuildLogEvent,
  BuildLogsResult,
  BuildStartedResult,
  BuildStatusResult,
  DeletedResult,
  Template,
  TemplateBuildBody,
  TemplateList,
  UploadLinkBody,
  UploadLinkResult,
  UploadResult,
} from '@sandboxd/protocol';
import type { SuccessDoc } from '../api-doc-types.js';
import { json, sse, event, BINARY } from './payloads.js';
import { BUILD, REQ, AT, SHA, template } from './examples.js';

const buildStatus = {
  build_id: BUILD,
  template_id: BUILD,
  status: 'building',
  progress: 33,
  current_step: 'APT cowsay',
  started_at: AT,
  completed_at: null,
  error_message: null,
  build_duration_ms: 41_206,
};

/** Templates, their builds and the files builds copy. */
export const TEMPLATE_RESPONSES: Record<string, SuccessDoc> = {
  'GET /v1/templates': { status: 200, description: 'the templates', content: json(TemplateList, { object: 'list', data: [template], request_id: REQ }) },
  'GET /v1/templates/{nameOrId}': { status: 200, description: 'the template', content: json(Template, { ...template, request_id: REQ }) },
  'DELETE /v1/templates/{nameOrId}': { status: 200, description: 'deleted', content: json(DeletedResult, { id: BUILD, status: 'deleted', request_id: REQ }) },
  'POST /v1/templates/build': {
    status: 202,
    description: 'the build started; follow it at logs_url and /status',
    content: json(BuildStartedResult, { build_id: BUILD, template_id: BUILD, status: 'building', logs_url: `/v1/templates/build/${BUILD}/logs`, request_id: REQ }),
    request: {
      content: {
        'application/json': {
          schema: TemplateBuildBody,
          examples: {
            steps: {
              summary: 'the spec shape',
              value: {
                alias: 'py-cowsay',
                cpu: 2,
                memory: 2048,
                diskGB: 10,
                steps: [
                  { type: 'from', image: 'python:3.11' },
                  { type: 'apt', packages: ['cowsay'] },
                  { type: 'run', command: 'pip install requests' },
                  { type: 'copy', src: ['app/main.py'], dest: '/workspace/app/' },
                  { type: 'env', key: 'APP_ENV', value: 'production' },
                  { type: 'workdir', path: '/workspace/app' },
                ],
              },
            },
            newer: {
              summary: 'the shape newer clients send',
              value: {
                name: 'py-cowsay',
                from_image: 'python:3.11',
                steps: [
                  { type: 'RUN', args: ['pip install requests'] },
                  { type: 'COPY', args: ['app/main.py', '/workspace/app/'], filesHash: 'a3f1c9e07b5d2846' },
                  { type: 'ENV', args: ['APP_ENV', 'production'] },
                ],
                update: true,
              },
            },
          },
        },
      },
    },
  },
  'GET /v1/templates/build/{id}/status': { status: 200, description: 'where the build is', content: json(BuildStatusResult, { ...buildStatus, request_id: REQ }) },
  'GET /v1/templates/build/{id}/logs': {
    status: 200,
    description: 'the log since offset as JSON; with Accept: text/event-stream, followed live until the build ends',
    content: {
      ...json(BuildLogsResult, {
        logs: `build ${BUILD}: template "py-cowsay", 3 steps, cpu 2, memory 2048 MB, disk 10 GB\n[1/3] FROM python:3.11\n[2/3] APT cowsay\n`,
        offset: 118,
        status: 'building',
        complete: false,
        request_id: REQ,
      }),
      ...sse(
        { log: BuildLogEvent, done: BuildDoneEvent },
        `${event('log', { level: 'INFO', message: '[2/3] APT cowsay', timestamp: null })}${event('log', { level: 'INFO', message: '[3/3] RUN pip install requests (cached)', timestamp: null })}${event('done', { status: 'active' })}`,
      ),
    },
  },
  'POST /v1/templates/files/upload-link': {
    status: 200,
    description: 'where to PUT each file (present: already uploaded, no PUT needed)',
    content: {
      'application/json': {
        schema: UploadLinkResult,
        examples: {
          files: {
            summary: 'for {files}',
            value: {
              upload_urls: [{ path: 'app/main.py', file_id: `f_${SHA}`, upload_url: 'http://127.0.0.1:8080/v1/templates/files/upload/eyJvIjoib3JnXzNm.Zm9vYmFy', expires_at: '2025-06-02T10:14:07.000Z', present: false }],
              request_id: REQ,
            },
          },
          tarball: {
            summary: 'for {files_hash, content_length}',
            value: { present: false, files_hash: 'a3f1c9e07b5d2846', upload_url: 'http://127.0.0.1:8080/v1/templates/files/upload/eyJvIjoib3JnXzNm.YmFyYmF6', expires_at: '2025-06-02T10:14:07.000Z', request_id: REQ },
          },
        },
      },
    },
    request: {
      content: {
        'application/json': {
          schema: UploadLinkBody,
          examples: {
            files: { summary: 'files by content hash (the spec shape)', value: { files: [{ path: 'app/main.py', size: 1832, hash: `sha256:${SHA}` }] } },
            tarball: { summary: 'one gzip tarball (newer clients)', value: { files_hash: 'a3f1c9e07b5d2846', content_length: 40_960 } },
          },
        },
      },
    },
  },
  'PUT /v1/templates/files/upload/{token}': {
    status: 200,
    description: 'stored: copy steps may name file_id',
    content: json(UploadResult, { success: true, file_id: `f_${SHA}`, size: 1832, sha256: SHA, request_id: REQ }),
    request: { content: { 'application/octet-stream': { schema: BINARY } } },
  },
};
