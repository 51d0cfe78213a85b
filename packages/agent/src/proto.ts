// The agent imports the protocol package by file: its index also pulls in the lifecycle schemas
// (TypeBox), which would only cost memory inside every sandbox.
export * from '@sandboxd/protocol/dist/errors.js';
export * from '@sandboxd/protocol/dist/render-error.js';
export * from '@sandboxd/protocol/dist/agent.js';
export * from '@sandboxd/protocol/dist/languages.js';
export * from '@sandboxd/protocol/dist/envd-wire.js';
