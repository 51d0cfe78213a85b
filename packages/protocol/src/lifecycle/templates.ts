import { Type, type Static } from '@sinclair/typebox';
import { nullable } from './helpers.js';

export const TemplateResources = Type.Object({
  vcpu: Type.Integer(),
  memory_mb: Type.Integer(),
  disk_gb: Type.Integer(),
});

export const TemplateSummary = Type.Object({
  object: Type.Literal('template'),
  id: Type.String(),
  name: Type.String(),
  display_name: Type.String(),
  description: Type.String(),
  category: Type.String(),
  language: Type.String(),
  default_resources: TemplateResources,
  status: Type.String(),
  is_active: Type.Boolean(),
  is_public: Type.Boolean(),
  build_id: Type.Union([Type.String(), Type.Null()]),
  features: Type.Array(Type.String()),
  tags: Type.Array(Type.String()),
  created_at: Type.String(),
  updated_at: Type.String(),
});
export type TemplateSummary = Static<typeof TemplateSummary>;

/** A template as `GET /v1/templates/{name_or_id}` (and each item of the list) renders it: the summary and how it is made. */
export const Template = Type.Composite([
  TemplateSummary,
  Type.Object({
    env: Type.Record(Type.String(), Type.String(), { description: 'variables every sandbox of the template starts with' }),
    workdir: Type.Union([Type.String(), Type.Null()], { description: 'the working directory of its sandboxes' }),
    layers: Type.Array(Type.String(), { description: 'its filesystem layers (sha256 hex ids), top-most first' }),
    error_message: Type.Union([Type.String(), Type.Null()], { description: 'why its last build failed' }),
    progress: Type.Optional(Type.Union([Type.Integer({ minimum: 0, maximum: 100 }), Type.Null()], { description: 'while a built-in template builds: percent done' })),
    request_id: Type.Optional(Type.String()),
  }),
]);
export type Template = Static<typeof Template>;

export const TemplateListQuery = Type.Object({
  category: Type.Optional(Type.String()),
  language: Type.Optional(Type.String()),
});

export const TemplateList = Type.Object({
  object: Type.Literal('list'),
  data: Type.Array(Template),
  request_id: Type.Optional(Type.String()),
});

/** `DELETE /v1/templates/{name_or_id}`. */
export const DeletedResult = Type.Object({ id: Type.String(), status: Type.Literal('deleted'), request_id: Type.Optional(Type.String()) });

const BUILD_STATUS = Type.String({ description: 'building, active or failed' });
const BuildStep = Type.Union(
  [
    Type.Object({ type: Type.Literal('from'), image: Type.String({ description: 'e.g. python:3.11, node:20, ubuntu:22.04, debian:11, alpine:3.18' }) }),
    Type.Object({ type: Type.Literal('apt'), packages: Type.Array(Type.String(), { minItems: 1 }) }),
    Type.Object({ type: Type.Literal('run'), command: Type.String() }),
    Type.Object({
      type: Type.Literal('copy'),
      dest: Type.String({ description: 'absolute path in the image' }),
      src: Type.Optional(Type.Union([Type.String(), Type.Array(Type.String())], { description: 'paths given at upload-link' })),
      file_id: Type.Optional(Type.String()),
      file_ids: Type.Optional(Type.Array(Type.String())),
    }),
    Type.Object({ type: Type.Literal('env'), key: Type.String(), value: Type.String() }),
    Type.Object({ type: Type.Literal('workdir'), path: Type.String() }),
    Type.Object({ type: Type.Union([Type.Literal('RUN'), Type.Literal('ENV'), Type.Literal('WORKDIR')]), args: Type.Array(Type.String()) }),
    Type.Object({
      type: Type.Literal('COPY'),
      args: Type.Array(Type.String(), { description: '["src1,src2", "/dest"]' }),
      filesHash: Type.String({ description: 'the files_hash of the tarball uploaded for this step' }),
      owner: Type.Optional(Type.String()),
      permissions: Type.Optional(Type.String()),
    }),
  ],
  { description: 'one step; the first is a from step (or from_image is given)' },
);
/**
 * `POST /v1/templates/build`, both shapes real clients send (api-decisions.md §5). The route checks
 * it itself (a bad one is INVALID_TEMPLATE_DEFINITION): this schema is for the document.
 */
export const TemplateBuildBody = Type.Object(
  {
    alias: Type.Optional(Type.String({ description: 'the template name: 1-63 lowercase letters, digits, ".", "_" or "-"; required, or given as name' })),
    name: Type.Optional(Type.String({ description: 'alias, as newer clients spell it' })),
    cpu: Type.Optional(Type.Integer({ minimum: 1, maximum: 64, description: 'vCPUs of its sandboxes; default 2 (within the organization limits)' })),
    memory: Type.Optional(Type.Integer({ minimum: 128, description: 'MB; default 2048' })),
    diskGB: Type.Optional(Type.Integer({ minimum: 1, description: 'GB; default 10' })),
    from_image: Type.Optional(Type.String({ description: 'the base image, instead of a first from step' })),
    steps: Type.Optional(Type.Array(BuildStep, { maxItems: 200 })),
    skipCache: Type.Optional(Type.Boolean({ description: 'run every step again, ignoring cached layers' })),
    update: Type.Optional(Type.Boolean({ description: 'rebuild an existing alias instead of answering 409' })),
  },
  { additionalProperties: true },
);
/** `POST /v1/templates/build` (202). */
export const BuildStartedResult = Type.Object({
  build_id: Type.String(),
  template_id: Type.String({ description: 'for a new template, the same value as build_id' }),
  status: BUILD_STATUS,
  logs_url: Type.String(),
  request_id: Type.Optional(Type.String()),
});
/** `GET /v1/templates/build/{id}/status`. */
export const BuildStatusResult = Type.Object({
  build_id: Type.String(),
  template_id: Type.String(),
  status: BUILD_STATUS,
  progress: Type.Number({ minimum: 0, maximum: 100 }),
  current_step: nullable(Type.String()),
  started_at: nullable(Type.String()),
  completed_at: nullable(Type.String()),
  error_message: nullable(Type.String()),
  build_duration_ms: nullable(Type.Number()),
  request_id: Type.Optional(Type.String()),
});
/** `GET /v1/templates/build/{id}/logs` as JSON. */
export const BuildLogsResult = Type.Object({
  logs: Type.String({ description: 'the lines since offset' }),
  offset: Type.Integer({ description: 'the offset to ask for next' }),
  status: BUILD_STATUS,
  complete: Type.Boolean({ description: 'the build ended and every line was sent' }),
  request_id: Type.Optional(Type.String()),
});
/** The data of a `log` event of the build logs stream. */
export const BuildLogEvent = Type.Object({
  level: Type.Union([Type.Literal('INFO'), Type.Literal('WARN'), Type.Literal('ERROR')]),
  message: Type.String(),
  timestamp: Type.Null(),
});
/** The data of the `done` event that ends the build logs stream. */
export const BuildDoneEvent = Type.Object({ status: BUILD_STATUS });

const FileMeta = Type.Object({
  path: Type.String({ description: 'relative path, as copy steps name it in src' }),
  size: Type.Integer({ minimum: 0, maximum: 100 * 1024 * 1024 }),
  hash: Type.String({ pattern: '^sha256:[0-9a-fA-F]{64}$' }),
});
/** `POST /v1/templates/files/upload-link`: the spec's files, or one tarball by files_hash. Checked by the route itself. */
export const UploadLinkBody = Type.Union([
  Type.Object({ files: Type.Array(FileMeta, { minItems: 1, maxItems: 100 }) }),
  Type.Object({ files_hash: Type.String({ pattern: '^[A-Za-z0-9:_-]{8,128}$' }), content_length: Type.Integer({ minimum: 0 }) }),
]);
export const UploadLinkResult = Type.Union([
  Type.Object({
    upload_urls: Type.Array(
      Type.Object({
        path: Type.String(),
        file_id: Type.String({ description: 'f_ and the sha256: what copy steps name' }),
        upload_url: Type.String({ description: 'PUT the bytes here, no other credentials; valid for 1 hour' }),
        expires_at: Type.String(),
        present: Type.Boolean({ description: 'the organization uploaded this content before: no PUT is needed' }),
      }),
    ),
    request_id: Type.Optional(Type.String()),
  }),
  Type.Object({
    present: Type.Boolean(),
    files_hash: Type.String(),
    upload_url: nullable(Type.String(), 'null when present'),
    expires_at: Type.String(),
    request_id: Type.Optional(Type.String()),
  }),
]);
/** `PUT` of an upload link. */
export const UploadResult = Type.Object({
  success: Type.Literal(true),
  file_id: Type.String(),
  size: Type.Integer(),
  sha256: Type.String(),
  request_id: Type.Optional(Type.String()),
});
