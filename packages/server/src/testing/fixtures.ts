import { FsLayerStore } from '../images/layer-store.js';
import { BASE_RECIPE } from '../images/builtin.js';
import type { LayerInfo } from '../images/types.js';

/** Shared between test runs so that image layers are built once per machine. */
export function testDataDir(): string {
  // Tests are the one place besides config/ allowed to read this variable (CONVENTIONS.md).
  return process.env.SANDBOXD_TEST_DATA_DIR ?? '/var/lib/sandboxd-test';
}

let store: FsLayerStore | undefined;

export async function layerStoreForTests(): Promise<FsLayerStore> {
  store ??= new FsLayerStore(`${testDataDir()}/layers`, { log: logIfVerbose });
  return store;
}

/** Progress goes to stderr only when asked (SANDBOXD_TEST_VERBOSE=1): a cold build prints hundreds of lines. */
function logIfVerbose(line: string): void {
  if (process.env.SANDBOXD_TEST_VERBOSE) process.stderr.write(`${line}\n`);
}

/** The built-in 'base' rootfs (Debian 12 minbase + bash, curl, ...); ~15 s the first time on a machine. */
export async function baseLayer(): Promise<LayerInfo> {
  const s = await layerStoreForTests();
  return s.ensureRootfs(BASE_RECIPE, logIfVerbose);
}
