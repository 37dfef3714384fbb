import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { TestProject } from "vitest/node"
import { startEmbeddedPostgres } from "../../src/platform/Database.ts"

declare module "vitest" {
  export interface ProvidedContext {
    databaseUrl: string
  }
}

/** Tests bring their own real PostgreSQL: `DATABASE_URL` when set, else an embedded server for this run. */
export default async function setup(project: TestProject) {
  if (process.env.DATABASE_URL) {
    project.provide("databaseUrl", process.env.DATABASE_URL)
    return
  }
  const directory = mkdtempSync(join(tmpdir(), "payments-test-pg-"))
  // Test data is disposable: trade durability for speed.
  const server = await startEmbeddedPostgres({
    directory,
    persistent: false,
    flags: ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "max_connections=300"]
  })
  project.provide("databaseUrl", server.url)
  return async () => {
    await server.stop()
    rmSync(directory, { recursive: true, force: true })
  }
}
