import { defineConfig } from 'vite';

// Served by the cloud at /console/ (same origin as /v1). Hashed asset names are cached immutably
// by the cloud; index.html is revalidated. No inline script or style: the CSP forbids them.
export default defineConfig({
  base: '/console/',
  resolve: { conditions: ['source'] },
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    // Inline assets would become data: URLs; keep every asset a file of its own.
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    target: 'es2022',
    sourcemap: false,
  },
});
