import { Type } from '@sinclair/typebox';

export const HealthResult = Type.Object({ status: Type.String(), version: Type.String() });
