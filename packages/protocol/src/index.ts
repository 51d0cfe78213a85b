export * from './errors.js';
export * from './lifecycle.js';
export * from './agent.js';
export * from './languages.js';
export * from './agent-routes.js';
export * from './agent-desktop.js';
export * from './render-error.js';
export * from './agent-responses.js';
