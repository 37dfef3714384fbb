import { spawn } from "node:child_process"
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { startNodeFlags } from "../../bench/host.ts"
import { freePort } from "../../src/platform/Database.ts"
import { client, createTransaction, eventually } from "../support/app.ts"
import { freshShellEnv } from "../support/childEnv.ts"

// A checkout in root's home directory (mode 0700, as in most containers), started as root with
// `npm start`: PostgreSQL runs as the postgres user, which cannot enter that directory, so the
// launcher keeps the binaries and the cluster where that user can reach them.

const root = resolve(import.meta.dirname, "../..")
const isRoot = process.getuid?.() === 0
if (!isRoot) console.log("root-start.test.ts: skipped, the tests do not run as root (this case needs root)")

describe.skipIf(!isRoot)("the first start as root from a 0700 directory", () => {
  const home = mkdtempSync(join(tmpdir(), "payments-root-home-"))
  const runtime = mkdtempSync(join(tmpdir(), "payments-embedded-root-"))
  afterAll(() => {
    rmSync(home, { recursive: true, force: true })
    rmSync(runtime, { recursive: true, force: true })
  })

  it("starts, serves a payment, and stops its database on SIGTERM", async () => {
    chmodSync(home, 0o700)
    chmodSync(runtime, 0o755)
    const checkout = join(home, "payments")
    mkdirSync(checkout)
    for (const entry of ["src", "bin", "package.json", "tsconfig.json"]) {
      cpSync(join(root, entry), join(checkout, entry), { recursive: true })
    }
    // A real node_modules inside the private directory (its binaries are unreachable for postgres).
    cpSync(join(root, "node_modules"), join(checkout, "node_modules"), { recursive: true, verbatimSymlinks: true })
    const port = await freePort()
    const env = freshShellEnv({ PORT: String(port), PAYMENTS_EMBEDDED_ROOT: runtime })
    // What `npm start` runs (package.json), without npm's own process in between.
    const service = spawn(process.execPath, [
      ...startNodeFlags(),
      "--import",
      "tsx",
      "src/main.ts",
      "serve"
    ], {
      cwd: checkout,
      env,
      stdio: ["ignore", "pipe", "pipe"]
    })
    let output = ""
    service.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()))
    service.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()))
    const exited = new Promise<number | null>((done) => service.once("exit", (code) => done(code)))
    try {
      const baseUrl = `http://127.0.0.1:${port}`
      await eventually(async () => {
        if (service.exitCode !== null) throw new Error(`the service exited ${service.exitCode}: ${output}`)
        const ready = await fetch(`${baseUrl}/readyz`).catch(() => null)
        return ready?.status === 200 ? true : undefined
      }, { timeoutMs: 90_000, intervalMs: 200, what: "the service to be ready" })
      const key = readFileSync(join(checkout, ".data/demo-api-key"), "utf8").trim()
      const payment = await createTransaction(client(baseUrl, key))
      expect(payment.status).toBe("captured")
      expect(output).not.toMatch(/EACCES|\n\s+at /)
      expect(existsSync(join(runtime, "clusters"))).toBe(true)
    } finally {
      service.kill("SIGTERM")
    }
    expect(await exited).toBe(0)
    // The cluster's server stopped with the service: its pid file is gone.
    const clusters = join(runtime, "clusters")
    await eventually(async () => {
      const left = readdirSync(clusters).filter((name) => existsSync(join(clusters, name, "postmaster.pid")))
      return left.length === 0 ? true : undefined
    }, { timeoutMs: 20_000, what: "the embedded PostgreSQL to stop" })
  })
})
