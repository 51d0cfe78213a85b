import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['**/dist/**', '**/bundle/**', '**/node_modules/**', '**/*.d.ts', 'packages/server/src/gateway/envd/gen/**'] },
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
  // Which module may import which (the server's layers, the packages' boundaries, no cycles):
  // scripts/check-imports.mjs, run by `npm run lint` after eslint.
  // Scripts that run in the browser (the /docs page's initializer).
  { files: ['packages/server/docs-ui/**/*.js'], languageOptions: { globals: { window: 'readonly' } } },
);
