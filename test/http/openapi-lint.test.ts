import { execFile } from "node:child_process"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { request, startApp, type TestApp } from "../support/app.ts"
import { freshShellEnv } from "../support/childEnv.ts"

// Issue 12, item 4: the OpenAPI document the service serves passes the ecosystem's standard
// linter (Redocly CLI, `recommended` rules) with no error and no warning.

const root = resolve(import.meta.dirname, "../..")
const redocly = resolve(root, "node_modules/@redocly/cli/bin/cli.js")

let app: TestApp
let scratch: string
beforeAll(async () => {
  app = await startApp({ label: "openapi" })
  scratch = mkdtempSync(join(tmpdir(), "payments-openapi-"))
})
afterAll(async () => {
  await app?.close()
  rmSync(scratch, { recursive: true, force: true })
})

const lint = (file: string) =>
  new Promise<{ code: number | null; stdout: string; stderr: string }>((done) => {
    execFile(
      process.execPath,
      [redocly, "lint", "--extends=recommended", "--format=json", file],
      // No telemetry and no update check: the test runs offline and sends nothing anywhere.
      {
        cwd: scratch,
        env: freshShellEnv({ REDOCLY_TELEMETRY: "off", REDOCLY_SUPPRESS_UPDATE_NOTICE: "true" }),
        timeout: 120_000
      },
      (error, stdout, stderr) =>
        done({ code: error === null ? 0 : typeof error.code === "number" ? error.code : null, stdout, stderr })
    )
  })

describe("GET /api/v1/openapi.json under redocly lint (recommended)", () => {
  it("passes with no errors and no warnings", async () => {
    const reply = await request(app.baseUrl, "GET", "/api/v1/openapi.json")
    expect(reply.status).toBe(200)
    const file = join(scratch, "openapi.json")
    writeFileSync(file, reply.text)
    const run = await lint(file)
    const report = JSON.parse(run.stdout) as { totals: { errors: number; warnings: number }; problems: Array<unknown> }
    expect(report.problems, run.stdout).toEqual([])
    expect(report.totals).toMatchObject({ errors: 0, warnings: 0 })
    expect(run.code).toBe(0)
  })

  it("the linter is not vacuous: a document without summaries fails it", async () => {
    const spec = (await request(app.baseUrl, "GET", "/api/v1/openapi.json")).body
    for (const path of Object.values<any>(spec.paths)) {
      for (const operation of Object.values<any>(path)) delete operation.summary
    }
    spec.servers = []
    const file = join(scratch, "broken.json")
    writeFileSync(file, JSON.stringify(spec))
    const run = await lint(file)
    expect(run.code).not.toBe(0)
    expect(run.stdout).toContain("operation-summary")
    expect(run.stdout).toContain("no-empty-servers")
  })

  it("declares every operation's summary, description, error responses and examples, the idempotency header and bearer auth", async () => {
    const spec = (await request(app.baseUrl, "GET", "/api/v1/openapi.json")).body
    expect(spec.servers.length).toBeGreaterThan(0)
    expect(spec.components.securitySchemes.bearer).toEqual({ type: "http", scheme: "bearer" })
    const resolveRef = (
      schema: any
    ): any => (schema?.$ref ? spec.components.schemas[schema.$ref.split("/").pop()] : schema)
    const hasExample = (schema: any): boolean => {
      const target = resolveRef(schema)
      if (target?.examples !== undefined) return true
      const members = (target?.anyOf ?? []).filter((member: any) => member.type !== "null")
      return members.length > 0 && members.every(hasExample)
    }
    let operations = 0
    for (const [path, methods] of Object.entries<any>(spec.paths)) {
      for (const [method, operation] of Object.entries<any>(methods)) {
        operations++
        const where = `${method.toUpperCase()} ${path}`
        expect(operation.summary, where).toMatch(/\S/)
        expect(operation.description, where).toMatch(/\S/)
        expect(Object.keys(operation.responses).filter((status) => Number(status) >= 400).length, where)
          .toBeGreaterThan(3)
        for (const response of Object.values<any>(operation.responses)) {
          for (const content of Object.values<any>(response.content ?? {})) {
            expect(hasExample(content.schema), `${where} response`).toBe(true)
          }
        }
        for (const content of Object.values<any>(operation.requestBody?.content ?? {})) {
          expect(hasExample(content.schema), `${where} body`).toBe(true)
        }
        // The processor's notifications are signed by the processor and applied once per its own
        // ids: no API key, no idempotency key of ours.
        if (path === "/api/v1/processor/notifications") {
          expect(operation.parameters.map((p: any) => `${p.in}:${p.name}`), where).toEqual(["header:stripe-signature"])
          expect(operation.security ?? [], where).toEqual([])
          continue
        }
        if (method === "post") {
          expect(operation.parameters.map((p: any) => `${p.in}:${p.name}`), where).toContain("header:x-idempotency-key")
        }
        if (path.startsWith("/api/v1/")) expect(operation.security, where).toEqual([{ bearer: [] }])
      }
    }
    expect(operations).toBe(28)
  })
})
