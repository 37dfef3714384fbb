import { Effect, Layer, Redacted } from "effect"
import { randomBytes } from "node:crypto"
import pg from "pg"
import { inject } from "vitest"
import * as Config from "../../src/platform/Config.ts"
import { defaultPoolTimeouts, migrate, pgClientLayer } from "../../src/platform/Database.ts"
import { layerPg } from "../../src/store/PgStore.ts"

/** Creates an empty database on the test server and returns its URL; each test file gets its own. */
export const freshDatabase = async (label = "t"): Promise<string> => {
  const serverUrl = inject("databaseUrl")
  const name = `${label}_${randomBytes(6).toString("hex")}`.toLowerCase().replace(/[^a-z0-9_]/g, "_")
  const client = new pg.Client({ connectionString: serverUrl })
  await client.connect()
  try {
    await client.query(`CREATE DATABASE ${name}`)
  } finally {
    await client.end()
  }
  const url = new URL(serverUrl)
  url.pathname = `/${name}`
  return url.toString()
}

/** The database clients for a database URL, with the migrations applied first. */
export const pgLayer = (url: string) =>
  Layer.unwrap(Effect.as(migrate(url, defaultPoolTimeouts), pgClientLayer(url, 10)))

/**
 * The RESPONSE_ENCRYPTION_KEY of the tests (as test/support/service.ts gives child processes):
 * the stores tests build seal webhook secrets as production does.
 */
export const testEncryptionKey = Redacted.make("ab".repeat(32))

/**
 * The PostgreSQL store (with its client and migrations) for a database URL; its secrets are
 * sealed under `testEncryptionKey` unless `config` says otherwise.
 */
export const pgStoreLayer = (url: string, config: Partial<Config.AppConfigShape> = {}) =>
  layerPg.pipe(
    Layer.provide(Config.layerWith(Config.defaultsWith({ responseEncryptionKey: testEncryptionKey, ...config }))),
    Layer.provideMerge(pgLayer(url))
  )
