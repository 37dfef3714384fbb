import { execFile } from "node:child_process"
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { createServer, type Server } from "node:net"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { freshShellEnv } from "../support/childEnv.ts"

// The gate itself (issue: `npm test` exited 0 when a test failed, because a library's exit hook
// called process.exit(0)). vitest runs here as a child process, as CI runs it, on fixtures kept
// outside the suite's include; and `npm start` is run the way a newcomer runs it.

const root = resolve(import.meta.dirname, "../..")
const vitest = resolve(root, "node_modules/vitest/vitest.mjs")
const tsx = resolve(root, "node_modules/.bin/tsx")

interface Run {
  readonly code: number | null
  readonly output: string
}

const runChild = (command: string, args: ReadonlyArray<string>, env: Record<string, string>) =>
  new Promise<Run>((done) => {
    execFile(
      command,
      args,
      { cwd: root, env: freshShellEnv(env), timeout: 90_000 },
      (error, stdout, stderr) =>
        done({
          code: error === null ? 0 : typeof error.code === "number" ? error.code : null,
          output: `${stdout}\n${stderr}`
        })
    )
  })

const runFixture = (fixture: string, setup?: string) =>
  runChild(process.execPath, [vitest, "run", "--config", "test/guard/fixtures/vitest.config.ts"], {
    GUARD_FIXTURE: fixture,
    ...(setup === undefined ? {} : { GUARD_SETUP: setup })
  })

describe("npm test's exit code (vitest with the embedded PostgreSQL set-up, as a child process)", () => {
  it("is 0 when every test passes", async () => {
    const run = await runFixture("passing.fixture.ts")
    expect(run.output).toContain("1 passed")
    expect(run.code).toBe(0)
  })

  it("is non-zero when a test fails, and the failure is printed", async () => {
    const run = await runFixture("failing.fixture.ts")
    expect(run.output).toContain("fails on purpose")
    expect(run.output).toMatch(/Tests\s+1 failed/)
    expect(run.code).not.toBe(0)
    expect(run.code).not.toBeNull()
  })

  it("is non-zero when the global set-up fails", async () => {
    const run = await runFixture("passing.fixture.ts", "./failingSetup.ts")
    expect(run.output).toContain("global set-up fails on purpose")
    expect(run.code).not.toBe(0)
  })

  it("is non-zero when an error is left unhandled", async () => {
    const run = await runFixture("unhandled.fixture.ts")
    expect(run.output).toContain("unhandled on purpose")
    expect(run.code).not.toBe(0)
  })

  it("is non-zero when a test file cannot load", async () => {
    const run = await runFixture("unloadable.fixture.ts")
    expect(run.output).toContain("does-not-exist")
    expect(run.code).not.toBe(0)
  })
})

describe("npm start's error paths exit non-zero with one clear line", () => {
  const start = (env: Record<string, string>) => runChild(tsx, ["src/main.ts", "serve"], env)
  let scratch: string
  let occupied: Server
  let occupiedPort = 0
  beforeAll(async () => {
    scratch = mkdtempSync(join(tmpdir(), "payments-start-"))
    // Reachable by root's postgres user, so the data stays where it is asked to be.
    chmodSync(scratch, 0o755)
    occupied = createServer()
    await new Promise<void>((done) => occupied.listen(0, "127.0.0.1", done))
    const address = occupied.address()
    occupiedPort = typeof address === "object" && address !== null ? address.port : 0
  })
  afterAll(async () => {
    await new Promise((done) => occupied.close(done))
    rmSync(scratch, { recursive: true, force: true })
  })

  it("invalid configuration: names the variable", async () => {
    const run = await start({ FRAUD_REVIEW_THRESHOLD: "abc", DATABASE_URL: "postgres://127.0.0.1:1/none" })
    expect(run.code).not.toBe(0)
    expect(run.output).toContain(
      "ConfigurationError: invalid configuration: FRAUD_REVIEW_THRESHOLD must be a number between 0 and 1, such as 0.5, got 'abc'"
    )
    expect(run.output).not.toContain("Invalid data at")
    expect(run.output).not.toMatch(/\n\s+at /)
  })

  it("an unreachable DATABASE_URL", async () => {
    const run = await start({ DATABASE_URL: "postgres://postgres:x@127.0.0.1:1/none" })
    expect(run.code).not.toBe(0)
    expect(run.output).not.toMatch(/\n\s+at /)
  })

  it("the embedded database cannot be created: one line saying what to do, no stack trace", async () => {
    const notADirectory = join(scratch, "file")
    writeFileSync(notADirectory, "")
    // With a response key given, the first thing to fail is the embedded database itself.
    const run = await start({
      PAYMENTS_DATA_DIR: notADirectory,
      PORT: String(occupiedPort + 1),
      RESPONSE_ENCRYPTION_KEY: "ab".repeat(32)
    })
    expect(run.code).not.toBe(0)
    expect(run.output).toContain("EmbeddedPostgresError")
    expect(run.output).toContain("DATABASE_URL")
    expect(run.output).not.toMatch(/\n\s+at /)
  })

  it("the data directory cannot hold the response key: one line naming what to set", async () => {
    const notADirectory = join(scratch, "file2")
    writeFileSync(notADirectory, "")
    const run = await start({ PAYMENTS_DATA_DIR: notADirectory, PORT: String(occupiedPort + 1) })
    expect(run.code).not.toBe(0)
    expect(run.output).toContain("DataDirectoryError")
    expect(run.output).toContain("PAYMENTS_DATA_DIR")
    expect(run.output).not.toMatch(/\n\s+at /)
  })

  it("an invalid RESPONSE_ENCRYPTION_KEY names the variable", async () => {
    const run = await start({ RESPONSE_ENCRYPTION_KEY: "short", DATABASE_URL: "postgres://127.0.0.1:1/none" })
    expect(run.code).not.toBe(0)
    expect(run.output).toContain("RESPONSE_ENCRYPTION_KEY")
  })

  it("the port is taken: says which port and how to choose another", async () => {
    const run = await start({ PORT: String(occupiedPort), PAYMENTS_DATA_DIR: join(scratch, "data") })
    expect(run.code).not.toBe(0)
    expect(run.output).toContain(`AddressInUse: port ${occupiedPort} on 127.0.0.1 is already in use`)
    expect(run.output).toContain(`choose another port with the PORT variable, e.g. PORT=${occupiedPort + 1} npm start`)
    expect(run.output).not.toMatch(/\n\s+at /)
  })

  it("an invalid HOST names the variable, like every other setting", async () => {
    for (const host of ["not a host", "127.0.0.1:3000", "-bad.example"]) {
      const run = await start({ HOST: host, DATABASE_URL: "postgres://127.0.0.1:1/none" })
      expect(run.code).not.toBe(0)
      expect(run.output).toContain(
        `ConfigurationError: invalid configuration: HOST must be an IP address or a host name to listen on, such as 127.0.0.1, 0.0.0.0 or ::1, got '${host}'`
      )
      expect(run.output).not.toMatch(/\n\s+at /)
    }
  })
})
