#!/usr/bin/env node
import { runCli } from './cli.js';

const controller = new AbortController();
let interrupts = 0;
const onSignal = (sig: NodeJS.Signals): void => {
  // A second Ctrl-C exits at once, whatever is in flight.
  if (++interrupts > 1) process.exit(sig === 'SIGINT' ? 130 : 143);
  controller.abort(new Error(`received ${sig}`));
};
process.on('SIGINT', onSignal);
process.on('SIGTERM', onSignal);
// `sbx ... | head` closes our stdout early; that is not an error.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code === 'EPIPE') process.exit(0);
  throw err;
});

const code = await runCli(process.argv.slice(2), { stdout: process.stdout, stderr: process.stderr, stdin: process.stdin, env: process.env }, controller.signal);
// Let stdout drain (pipes are asynchronous) before exiting with the status.
process.exitCode = code;
if (process.stdout.writableNeedDrain) process.stdout.once('drain', () => process.exit(code));
else process.exit(code);
