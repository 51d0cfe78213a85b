// The node conformance suite against LocalNode over the FakeRuntime (no root): the take, the warm
// pool and the verbs as the all-in-one daemon's services see them, without containers.
import { nodeConformance } from './conformance.js';
import { fakeNodeHarness } from '../testing/node-harness.js';

nodeConformance('LocalNode over a FakeRuntime', () => fakeNodeHarness());
