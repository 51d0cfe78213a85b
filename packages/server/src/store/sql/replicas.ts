import { Params, type SqlDb } from './db.js';
import { replicaFrom } from './rows.js';
import { checkNow, checkReplicaEntry } from './checks.js';
import type { ReplicaEntry, ReplicaRepo } from '../types/index.js';

const MAX_ID_LENGTH = 200;

export class SqlReplicaRepo implements ReplicaRepo {
  constructor(private readonly db: SqlDb) {}

  async beat(entry: ReplicaEntry, now?: string) {
    const e = checkReplicaEntry(entry);
    const p = new Params();
    const { at } = this.db.dialect.clock(p, checkNow(now));
    // A process beats under one id for its whole life: what it said at its start does not change.
    await this.db.run(
      `INSERT INTO replicas (id, role, hostname, pid, url, version, started_at, seen_at, stopped_at)
       VALUES (${p.add(e.id)}, ${p.add(e.role)}, ${p.add(e.hostname)}, ${p.add(e.pid)}, ${p.add(e.url)}, ${p.add(e.version)}, ${p.add(e.startedAt)}, ${at}, NULL)
       ON CONFLICT (id) DO UPDATE SET url = excluded.url, seen_at = excluded.seen_at, stopped_at = NULL`,
      p.values,
    );
  }

  async stopped(id: string, now?: string) {
    if (typeof id !== 'string' || id.length === 0 || id.length > MAX_ID_LENGTH) throw new TypeError('a replica id is 1 to 200 characters');
    const p = new Params();
    const { at } = this.db.dialect.clock(p, checkNow(now));
    return (await this.db.run(`UPDATE replicas SET stopped_at = ${at}, seen_at = ${at} WHERE id = ${p.add(id)}`, p.values)) > 0;
  }

  async list() {
    const p = new Params();
    const { at } = this.db.dialect.clock(p, undefined);
    // The clock first: a beat written between the two reads is a moment past `now` (an age below 0, taken as 0).
    const now = String((await this.db.get(`SELECT ${at} AS now`, p.values))!.now);
    const replicas = (await this.db.all('SELECT * FROM replicas ORDER BY role, started_at, id')).map(replicaFrom);
    return { now, replicas };
  }

  async forget(before: string) {
    const at = checkNow(before);
    if (at === undefined) throw new TypeError('forget() needs a time');
    return this.db.run('DELETE FROM replicas WHERE seen_at < $1', [at]);
  }
}
