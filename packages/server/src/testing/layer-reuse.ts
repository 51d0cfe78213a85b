import { randomBytes } from 'node:crypto';
import { rename } from 'node:fs/promises';
import { join } from 'node:path';
import { FsLayerStore, type Log } from '../images/layer-store.js';
import { removeTreeWithMounts, runTool } from '../runtime/proc.js';

/**
 * Takes into `into` each of `ids` it lacks that the layer directory `from` holds finished (another
 * daemon's, e.g. the service's own): a hard-link copy (`cp -al`, no bytes copied) into a temporary
 * directory of `into`, renamed into place in one step, so the copy appears whole or not at all and
 * stays when `from` deletes its own. Layers are keyed by their recipe, so an equal id is an equal
 * layer. Returns the ids taken; one that cannot be taken (another filesystem) is left to be built.
 */
export async function takeLayers(into: FsLayerStore, from: string, ids: string[], log: Log): Promise<string[]> {
  if (from === into.root) return [];
  const source = new FsLayerStore(from);
  const taken: string[] = [];
  for (const id of ids) {
    if ((await into.has(id)) || !(await source.has(id))) continue;
    const tmp = join(into.root, `.tmp-${id}-${process.pid}-take-${randomBytes(4).toString('hex')}`);
    try {
      await runTool('cp', ['-al', '--', join(from, id), tmp]);
      await rename(tmp, join(into.root, id));
      taken.push(id);
      log(`took layer ${id.slice(0, 12)} from ${from}`);
    } catch (err) {
      log(`cannot take layer ${id.slice(0, 12)} from ${from}: ${String(err)}`);
      await removeTreeWithMounts(tmp).catch(() => undefined);
    }
  }
  return taken;
}
