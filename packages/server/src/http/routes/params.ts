import { Type, type Static } from '@sinclair/typebox';

export const SandboxIdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 128 }) });
export type SandboxIdParams = Static<typeof SandboxIdParams>;

export const NameOrIdParams = Type.Object({ nameOrId: Type.String({ minLength: 1, maxLength: 200 }) });
export type NameOrIdParams = Static<typeof NameOrIdParams>;
