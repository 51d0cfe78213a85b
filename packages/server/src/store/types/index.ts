/**
 * Repository interfaces, async for the networked store (PostgreSQL); one implementation of them
 * serves both databases (sql/). State changes of a sandbox are compare-and-set on its `version`.
 */

export * from './accounts.js';
export * from './nodes.js';
export * from './replicas.js';
export * from './sandboxes.js';
export * from './snapshots.js';
export * from './store.js';
export * from './templates.js';
export * from './uploads.js';
export * from './volumes.js';
