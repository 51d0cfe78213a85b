// The node conformance suite against RemoteNode: the node API in front of a LocalNode (over the
// FakeRuntime), over real HTTP on loopback. What the wire keeps of the contract (takes, states,
// error codes, idempotence, agent connections relayed by CONNECT), without root.
import { nodeConformance } from './conformance.js';
import { fakeNodeHarness } from '../testing/node-harness.js';

nodeConformance('RemoteNode over a node API', () => fakeNodeHarness({}));
