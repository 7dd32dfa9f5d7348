import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    // Fails the run if ~/.config/kvcanary (or $XDG_CONFIG_HOME/kvcanary) changed while it ran.
    globalSetup: ['test/helpers/home-guard.ts'],
    include: ['test/**/*.test.ts'],
    // test/real needs a built llama-server (scripts/setup-test-env.sh): `npm run test:real`.
    exclude: ['test/real/**', 'node_modules/**'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Engines and servers under test are CPU-heavy; two cores, so keep files from starving each other.
    maxWorkers: 2,
  },
});
