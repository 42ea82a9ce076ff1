// @ts-check
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

const workspacePatterns = [
  { group: ['@fleet/*/src', '@fleet/*/src/*', '@fleet/*/dist/*'], message: "Import another workspace by its package name, not its internals." },
  { group: ['**/cloud/src/*', '**/agent/src/*', '**/simulator/src/*', '**/packages/*/src/*'], message: "Import another workspace by its package name, not its src/ internals." },
];

export default tseslint.config(
  { ignores: ['**/dist/**', '**/node_modules/**', 'data/**', 'coverage/**', '.tmp/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: { allowDefaultProject: ['*.js'] }, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports' }],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/require-await': 'off',
      '@typescript-eslint/no-non-null-assertion': 'off',
      'no-restricted-imports': ['error', { patterns: workspacePatterns }],
    },
  },
  {
    // The cloud reaches its database only through the store interface: the database drivers stay
    // inside cloud/src/store, so that every part runs unchanged on SQLite and on PostgreSQL.
    files: ['cloud/src/**/*.ts'],
    ignores: ['cloud/src/store/**'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths: [
            { name: 'better-sqlite3', message: 'Only cloud/src/store talks to the database; use the Store interface.' },
            { name: 'pg', message: 'Only cloud/src/store talks to the database; use the Store interface.' },
          ],
          patterns: [...workspacePatterns, { group: ['**/store/sqlite/*', '**/store/postgres/*'], message: 'Use the Store interface (store/index.js), not an engine module.' }],
        },
      ],
    },
  },
  {
    // The store's layout: shared/ (interfaces, row types, mappers) imports neither engine, and
    // each engine imports shared/ but never the other engine.
    files: ['cloud/src/store/shared/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [...workspacePatterns, { group: ['**/sqlite/*', '**/postgres/*'], message: 'shared/ knows no engine.' }] }],
    },
  },
  {
    files: ['cloud/src/store/sqlite/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [...workspacePatterns, { group: ['**/postgres/*', 'pg'], message: 'The SQLite engine imports shared/, never the PostgreSQL engine.' }] }],
    },
  },
  {
    files: ['cloud/src/store/postgres/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [...workspacePatterns, { group: ['**/sqlite/*', 'better-sqlite3'], message: 'The PostgreSQL engine imports shared/, never the SQLite engine.' }] }],
    },
  },
  {
    // End-to-end tests, benchmarks, the soak and the demo may reach into a workspace's internals; nothing else may.
    files: ['test/**/*.ts', 'bench/**/*.ts', 'soak/**/*.ts', 'demo/**/*.ts', '**/*.test.ts'],
    rules: { 'no-restricted-imports': 'off' },
  },
  {
    files: ['**/*.js'],
    ...tseslint.configs.disableTypeChecked,
  },
);
