// Builds (or finds cached) every built-in template in the shared test layer dir before the suite
// runs, so that no single test pays minutes of mmdebstrap and times out.
import { ensureBuiltinTemplates } from '../images/bootstrap.js';
import { BUILTIN_TEMPLATES } from '../images/builtin.js';
import { chmodSync, statSync } from 'node:fs';
import { layerStoreForTests, testDataDir } from './fixtures.js';

const store = await layerStoreForTests();
const log = (line: string) => process.stderr.write(`[warm] ${line}\n`);
await ensureBuiltinTemplates(store, BUILTIN_TEMPLATES, log);
// The layer store made the shared dir 0700 when it created it; the test daemons' and runtimes'
// data dirs below it must be reachable by sandbox users (crun-runtime checks o+x), as
// /var/lib is for the service's own.
const mode = statSync(testDataDir()).mode & 0o7777;
if ((mode & 0o001) === 0) chmodSync(testDataDir(), mode | 0o011);
