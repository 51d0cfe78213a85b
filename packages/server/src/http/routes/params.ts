import { Type, type Static } from '@sinclair/typebox';

export const SandboxIdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 128 }) });
export type SandboxIdParams = Static<typeof SandboxIdParams>;

export const NameOrIdParams = Type.Object({ nameOrId: Type.String({ minLength: 1, maxLength: 200 }) });
export type NameOrIdParams = Static<typeof NameOrIdParams>;

export const SandboxPortParams = Type.Object({
  id: Type.String({ minLength: 1, maxLength: 128 }),
  port: Type.Integer({ minimum: 1, maximum: 65535 }),
});
export type SandboxPortParams = Static<typeof SandboxPortParams>;
