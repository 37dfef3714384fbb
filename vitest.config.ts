import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/support/globalSetup.ts"],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Two cores: files run in two forks, each with its own databases on the shared server.
    pool: "forks",
    maxWorkers: 2,
    sequence: { shuffle: false }
  }
})
