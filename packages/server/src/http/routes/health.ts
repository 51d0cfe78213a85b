import type { FastifyInstance } from 'fastify';
import { HealthResult } from '@sandboxd/protocol';
import type { Services } from '../services.js';

export function healthRoute(app: FastifyInstance, s: Services): void {
  app.get('/health', { schema: { response: { 200: HealthResult } } }, async () => ({ status: 'ok', version: s.config.version }));
}
