import type { Config } from '../config.js';
import type { Store } from '../store/types.js';
import type { EventBus } from './events.js';
import type { KeyService } from './keys.js';
import type { SlidingWindowLimiter } from './rate-limit.js';
import type { SandboxService } from './sandboxes.js';
import type { TemplateService } from './templates.js';

/** Everything the HTTP layer may call. */
export interface Services {
  config: Config;
  store: Store;
  keys: KeyService;
  sandboxes: SandboxService;
  templates: TemplateService;
  events: EventBus;
  createLimiter: SlidingWindowLimiter;
  /** Set once the template builder is wired in (issue: custom templates). */
  extraRoutes?: Array<(app: import('fastify').FastifyInstance, services: Services) => Promise<void> | void>;
}
