/** Shapes of the lifecycle interface (`/v1/...`): service-spec.md plus api-decisions.md §2. */

export * from './sandboxes.js';
export * from './volumes.js';
export * from './snapshots.js';
export * from './templates.js';
export * from './events.js';
export * from './account.js';
export * from './admin.js';
export * from './nodes.js';
export * from './service.js';
