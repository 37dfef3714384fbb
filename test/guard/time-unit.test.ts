import { readdirSync, readFileSync, statSync } from "node:fs"
import { join } from "node:path"
import ts from "typescript"
import { describe, expect, it } from "vitest"

// One time unit inside (docs/architecture.md): the domain, the services, the stores and the
// workers hold times as epoch milliseconds, one number per fact; ISO 8601 text exists only at the
// wire (src/http, the webhook payload) and in SQL (the PostgreSQL adapters convert at their
// boundary). So in those folders a time is never declared as text (a field, parameter or variable
// named as a time, `createdAt`, `now`, `until`, `daySince`, `capturedBefore`, typed `string`), and
// no name carries a second encoding of a time beside the first (`nowMs`, `atMs`, `createdAtMs`).

const root = join(import.meta.dirname, "../..")
const folders = ["src/domain", "src/services", "src/store", "src/workers"]

/** A name that says it holds a time. */
const timeName = /^(now|at|until|since|before|cutoff|\w+At|\w+Until|\w+Since|\w+Before)$/
/** A name that says it holds a time in ms beside another encoding of it. */
const twinName = /^(nowMs|atMs|\w+AtMs)$/

/**
 * Text that is a time on purpose, each with its reason: the wire's text or SQL's, at the boundary
 * where it is made or read.
 */
const allowed: Readonly<Record<string, string>> = {
  "src/domain/Webhook.ts createdAt": "eventPayload's `created_at`: the payload is wire text",
  "src/store/PgHotPath.ts until": "HistoryExpressions: SQL expressions that read the times, not times",
  "src/store/PgHotPath.ts hourSince": "HistoryExpressions: SQL expressions that read the times, not times",
  "src/store/PgHotPath.ts daySince": "HistoryExpressions: SQL expressions that read the times, not times",
  "src/store/rows/Payment.ts openedAt": "the dispute's jsonb column as stored (SQL compares it as text)",
  "src/store/rows/Payment.ts resolvedAt": "the dispute's jsonb column as stored",
  "src/store/rows/Payment.ts since": "the processor_pending jsonb column as stored",
  "src/store/rows/Delivery.ts at": "the attempts jsonb column as stored"
}

const filesUnder = (folder: string): Array<string> =>
  readdirSync(join(root, folder)).flatMap((name) => {
    const path = `${folder}/${name}`
    if (statSync(join(root, path)).isDirectory()) return filesUnder(path)
    return name.endsWith(".ts") ? [path] : []
  })

/** Whether a type annotation admits text: `string`, or a union with it. */
const isText = (type: ts.TypeNode | undefined): boolean =>
  type !== undefined && (type.kind === ts.SyntaxKind.StringKeyword ||
    (ts.isUnionTypeNode(type) && type.types.some((t) => t.kind === ts.SyntaxKind.StringKeyword)))

const findings = (file: string): Array<string> => {
  const source = ts.createSourceFile(file, readFileSync(join(root, file), "utf8"), ts.ScriptTarget.Latest, true)
  const found: Array<string> = []
  const visit = (node: ts.Node) => {
    if (ts.isIdentifier(node) && twinName.test(node.text)) {
      const { line } = source.getLineAndCharacterOfPosition(node.getStart(source))
      found.push(`${file}:${line + 1}: ${node.text} (a second encoding of a time)`)
    }
    if (
      (ts.isPropertySignature(node) || ts.isParameter(node) || ts.isVariableDeclaration(node) ||
        ts.isPropertyDeclaration(node)) &&
      ts.isIdentifier(node.name) && timeName.test(node.name.text) && isText(node.type) &&
      allowed[`${file} ${node.name.text}`] === undefined
    ) {
      const { line } = source.getLineAndCharacterOfPosition(node.getStart(source))
      found.push(`${file}:${line + 1}: ${node.name.text} as text`)
    }
    ts.forEachChild(node, visit)
  }
  visit(source)
  return found
}

describe("one time unit inside", () => {
  it("times are epoch milliseconds in src/domain, src/services, src/store and src/workers, with no twin in another encoding", () => {
    const files = folders.flatMap(filesUnder)
    expect(files.length).toBeGreaterThan(20)
    expect(files.flatMap(findings)).toEqual([])
  })

  it("sees a time as text and a twin name (a check of the check)", () => {
    const probe = (text: string) => {
      const source = ts.createSourceFile("probe.ts", text, ts.ScriptTarget.Latest, true)
      const names: Array<string> = []
      const visit = (node: ts.Node) => {
        if (ts.isIdentifier(node) && twinName.test(node.text)) names.push(node.text)
        if (
          (ts.isPropertySignature(node) || ts.isParameter(node)) && ts.isIdentifier(node.name) &&
          timeName.test(node.name.text) && isText(node.type)
        ) names.push(node.name.text)
        ts.forEachChild(node, visit)
      }
      visit(source)
      return names
    }
    expect(probe("interface A { readonly createdAt: string | null; readonly name: string }")).toEqual(["createdAt"])
    expect(probe("const f = (now: string, id: string, atMs: number) => 0")).toEqual(["now", "atMs"])
    expect(probe("interface B { readonly updatedAt: number; readonly leaseUntil: number }")).toEqual([])
  })
})
