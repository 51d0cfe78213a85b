import { Type, type TSchema } from '@sinclair/typebox';

// What the schema files share; index.ts does not re-export it (no part of the protocol).

// Answers of the routes that render their own objects (no response schema on the route: these
// describe them for the OpenAPI document, and http/openapi.test checks real answers against them).
export const nullable = <T extends TSchema>(t: T, description?: string) => Type.Union([t, Type.Null()], description ? { description } : {});
