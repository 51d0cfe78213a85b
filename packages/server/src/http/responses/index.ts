import { DESKTOP_RESPONSES } from '../api-desktop.js';
import type { SuccessDoc } from '../api-doc-types.js';
import { ACCOUNT_RESPONSES } from './account.js';
import { ADMIN_RESPONSES } from './admin.js';
import { AGENT_CODE_RESPONSES } from './agent-code.js';
import { AGENT_FILE_RESPONSES } from './agent-files.js';
import { AGENT_SYSTEM_RESPONSES } from './agent-system.js';
import { EVENT_RESPONSES } from './events.js';
import { SANDBOX_RESPONSES } from './sandboxes.js';
import { SERVICE_RESPONSES } from './service.js';
import { SNAPSHOT_RESPONSES } from './snapshots.js';
import { TEMPLATE_RESPONSES } from './templates.js';
import { VOLUME_RESPONSES } from './volumes.js';

/**
 * What the OpenAPI document says of each operation's success: its status, its body by media type
 * with a schema and examples, and an example of its request body. Keyed as OPERATIONS in
 * api-docs.ts. openapi.test checks that every operation has one, that every example validates
 * against its schema, and that what the routes really answer validates too.
 *
 * The schemas come from the protocol package. A JSON schema given here for a route that declares
 * its own response schema must be that same schema (the route's is what Fastify serializes with);
 * routes without one are described here only, so that a mistake in a description can never drop a
 * field from a real answer.
 */
export type { Payload, SuccessDoc } from '../api-doc-types.js';

/** The lifecycle API's operations. */
export const RESPONSES: Record<string, SuccessDoc> = {
  ...SERVICE_RESPONSES,
  ...SANDBOX_RESPONSES,
  ...SNAPSHOT_RESPONSES,
  ...VOLUME_RESPONSES,
  ...EVENT_RESPONSES,
  ...ACCOUNT_RESPONSES,
  ...ADMIN_RESPONSES,
  ...TEMPLATE_RESPONSES,
};

/** The agent API's operations, keyed without the /agent prefix. */
export const AGENT_RESPONSES: Record<string, SuccessDoc> = {
  ...AGENT_SYSTEM_RESPONSES,
  ...AGENT_CODE_RESPONSES,
  ...AGENT_FILE_RESPONSES,
  ...DESKTOP_RESPONSES,
};
