import { SqliteStore } from './sqlite.js';
import { storeConformance } from './conformance.js';

storeConformance('SqliteStore', async () => SqliteStore.open(':memory:'));
