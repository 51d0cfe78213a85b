// Builds (or finds cached) every built-in template in the shared test layer dir before the suite
// runs, so that no single test pays minutes of mmdebstrap and times out.
import { ensureBuiltinTemplates } from '../images/bootstrap.js';
import { BUILTIN_TEMPLATES } from '../images/builtin.js';
import { layerStoreForTests } from './fixtures.js';

const store = await layerStoreForTests();
const log = (line: string) => process.stderr.write(`[warm] ${line}\n`);
await ensureBuiltinTemplates(store, BUILTIN_TEMPLATES, log);
