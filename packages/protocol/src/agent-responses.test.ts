import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Static, TSchema } from '@sinclair/typebox';
import type { AgentHealth, AgentInfo, BackgroundStarted, CacheStats, CommandResult, EnvResult, ExecuteResult, FileListResult, FileWriteResult, KillResult, ProcessInfo } from './agent.js';
import type {
  AgentHealthResponse,
  AgentInfoResponse,
  BackgroundStartedResponse,
  CacheStatsResponse,
  CommandResponse,
  EnvResponse,
  ExecuteResponse,
  FileListResponse,
  FileWrittenResponse,
  KillResponse,
  ProcessInfoResponse,
} from './agent-responses.js';

// The agent builds its answers from the interfaces of agent.ts; the document describes them with
// the schemas of agent-responses.ts. Both ways, field by field: a field the agent sends (required or
// optional) that the schema lacks, or a required one it declares that the agent may not send, or a
// type that differs, fails the build of this file.
type Exact<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
/** Only the fields the interface declares (the schemas also list fields the interfaces leave out). */
type Declared<S, I> = Pick<S, keyof S & keyof I> & { [K in Exclude<keyof I, keyof S>]: never };
type Agrees<Schema extends TSchema, Iface> = Exact<Declared<Static<Schema>, Iface>, Iface> extends true
  ? true
  : { schema: Declared<Static<Schema>, Iface>; interface: Iface };

const checks: true[] = [
  true satisfies Agrees<typeof ExecuteResponse, ExecuteResult>,
  true satisfies Agrees<typeof CommandResponse, CommandResult>,
  true satisfies Agrees<typeof BackgroundStartedResponse, BackgroundStarted>,
  true satisfies Agrees<typeof ProcessInfoResponse, ProcessInfo>,
  true satisfies Agrees<typeof KillResponse, KillResult>,
  true satisfies Agrees<typeof FileListResponse, FileListResult>,
  true satisfies Agrees<typeof FileWrittenResponse, FileWriteResult>,
  true satisfies Agrees<typeof EnvResponse, EnvResult>,
  true satisfies Agrees<typeof CacheStatsResponse, CacheStats>,
  true satisfies Agrees<typeof AgentHealthResponse, AgentHealth>,
  true satisfies Agrees<typeof AgentInfoResponse, AgentInfo>,
];

test('the agent response schemas agree with the interfaces the agent answers with (checked when this file compiles)', () => {
  assert.equal(checks.length, 11);
});
