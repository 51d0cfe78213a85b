import type { FastifyInstance } from 'fastify';
import type { Services } from '../services.js';
import { healthRoute } from './health.js';
import { createSandboxRoute } from './sandbox-create.js';
import { getSandboxRoute } from './sandbox-get.js';
import { listSandboxesRoute } from './sandbox-list.js';
import { deleteSandboxRoute } from './sandbox-delete.js';
import { sandboxActionRoutes } from './sandbox-actions.js';
import { sandboxTimeoutRoute } from './sandbox-timeout.js';
import { tokenRefreshRoute } from './sandbox-token.js';
import { eventsRoutes } from './events.js';
import { listTemplatesRoute } from './template-list.js';
import { getTemplateRoute } from './template-get.js';
import { accountLimitsRoute } from './account-limits.js';
import { templateBuildRoute } from './template-build.js';
import { templateBuildStatusRoute } from './template-build-status.js';
import { templateBuildLogsRoute } from './template-build-logs.js';
import { uploadLinkRoute } from './template-upload-link.js';
import { uploadPutRoute } from './template-upload-put.js';
import { deleteTemplateRoute } from './template-delete.js';
import { metricsRoutes } from './metrics.js';
import { sandboxNetworkRoutes } from './sandbox-network.js';
import { adminRoutes } from './admin.js';
import { adminNodesRoute } from './admin-nodes.js';
import { adminNodeDrainRoute } from './admin-node-drain.js';
import { snapshotRoutes } from './snapshots.js';
import { internalLayerRoutes } from './internal-layers.js';
import { internalNodeRoutes } from './internal-nodes.js';
import { e2bRoutes } from './e2b.js';
import { volumeRoutes } from './volumes.js';
import { mcpRoutes } from './mcp.js';

export async function registerRoutes(app: FastifyInstance, s: Services): Promise<void> {
  for (const register of [
    healthRoute,
    createSandboxRoute,
    listSandboxesRoute,
    getSandboxRoute,
    deleteSandboxRoute,
    sandboxActionRoutes,
    sandboxTimeoutRoute,
    tokenRefreshRoute,
    eventsRoutes,
    listTemplatesRoute,
    getTemplateRoute,
    accountLimitsRoute,
    templateBuildRoute,
    templateBuildStatusRoute,
    templateBuildLogsRoute,
    uploadLinkRoute,
    uploadPutRoute,
    deleteTemplateRoute,
    metricsRoutes,
    sandboxNetworkRoutes,
    snapshotRoutes,
    volumeRoutes,
    mcpRoutes,
    adminRoutes,
    adminNodesRoute,
    adminNodeDrainRoute,
    internalLayerRoutes,
    internalNodeRoutes,
    e2bRoutes,
  ]) {
    await register(app, s);
  }
}
