import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['**/dist/**', '**/bundle/**', '**/node_modules/**', '**/*.d.ts'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: { process: 'readonly', Buffer: 'readonly', console: 'readonly', setTimeout: 'readonly', clearTimeout: 'readonly', setInterval: 'readonly', clearInterval: 'readonly', setImmediate: 'readonly', URL: 'readonly', fetch: 'readonly', AbortController: 'readonly', AbortSignal: 'readonly' } },
    rules: {
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
      'no-empty': ['error', { allowEmptyCatch: true }],
    },
  },
  // The server's layers, one way: roles → http and gateway → services → placement → node → builder →
  // images → runtime; store beside them. A lower layer never reaches up (runtime is what a node runs:
  // it must not need the services, the store or the API). Tests may use the fixtures of testing/.
  ...layerRules({
    runtime: ['services', 'http', 'gateway', 'store', 'images', 'builder', 'config', 'main', 'auth', 'node', 'placement', 'roles'],
    images: ['services', 'http', 'gateway', 'store', 'builder', 'config', 'main', 'auth', 'node', 'placement', 'roles'],
    store: ['services', 'http', 'gateway', 'runtime', 'images', 'builder', 'config', 'main', 'auth', 'node', 'placement', 'roles'],
    builder: ['services', 'http', 'gateway', 'store', 'config', 'main', 'auth', 'node', 'placement', 'roles'],
    // A node: its machine's runtime, warm pool and layers; nothing of the services or placement. It
    // speaks the registry's row shapes (types only): it runs without a store.
    node: ['services', 'http', 'gateway', 'main', 'auth', 'placement', 'roles', { dir: 'store', allowTypeImports: true }],
    placement: ['services', 'http', 'gateway', 'main', 'auth', 'roles'],
    services: ['http', 'gateway', 'main', 'roles'],
    gateway: ['http', 'main', 'runtime', 'images', 'builder', 'store', 'node', 'placement', 'roles'],
    http: ['main', 'runtime', 'images', 'builder', 'node', 'placement', 'roles'],
    roles: ['main'],
  }),
  // Scripts that run in the browser (the /docs page's initializer).
  { files: ['packages/server/docs-ui/**/*.js'], languageOptions: { globals: { window: 'readonly' } } },
);

/** One no-restricted-imports rule per folder of packages/server/src: the folders it must not import. */
function layerRules(layers) {
  return Object.entries(layers).map(([dir, banned]) => ({
    files: [`packages/server/src/${dir}/**/*.ts`],
    ignores: ['**/*.test.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: banned.map((entry) => {
            const b = typeof entry === 'string' ? entry : entry.dir;
            return {
              group: [`**/${b}/*`, `**/${b}.js`, `../${b}`, `../../${b}`],
              message: `${dir}/ must not import ${b}: the server's layers point one way (eslint.config.js)`,
              ...(typeof entry === 'string' ? {} : { allowTypeImports: entry.allowTypeImports }),
            };
          }),
        },
      ],
    },
  }));
}
