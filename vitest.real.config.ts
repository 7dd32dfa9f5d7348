import { defineConfig } from 'vitest/config';

/** Tests against real third-party servers built by scripts/setup-test-env.sh (llama.cpp's llama-server). */
export default defineConfig({
  test: {
    // Fails the run if ~/.config/kvcanary (or $XDG_CONFIG_HOME/kvcanary) changed while it ran.
    globalSetup: ['test/helpers/home-guard.ts'],
    include: ['test/real/**/*.test.ts'],
    testTimeout: 300_000,
    hookTimeout: 120_000,
    // One real server at a time: they are CPU-heavy and these machines have two cores.
    maxWorkers: 1,
    fileParallelism: false,
  },
});
