import { Type } from '@sinclair/typebox';
import { HealthResult } from '@sandboxd/protocol';
import type { SuccessDoc } from '../api-doc-types.js';
import { json } from './payloads.js';

/** The service's own operations: its health and its metrics. */
export const SERVICE_RESPONSES: Record<string, SuccessDoc> = {
  'GET /health': { status: 200, description: 'the service runs', content: json(HealthResult, { status: 'ok', version: '0.1.0' }) },
  'GET /metrics': {
    status: 200,
    description: 'the Prometheus text exposition format (version 0.0.4)',
    content: {
      'text/plain': {
        schema: Type.String({ description: 'Prometheus text format' }),
        example:
          '# HELP sandboxd_http_requests_total API requests by route pattern, method and status\n# TYPE sandboxd_http_requests_total counter\nsandboxd_http_requests_total{route="/v1/sandboxes",method="POST",status="201"} 42\n# HELP sandboxd_sandboxes Sandboxes by state\n# TYPE sandboxd_sandboxes gauge\nsandboxd_sandboxes{state="running"} 3\n',
      },
    },
  },
};
