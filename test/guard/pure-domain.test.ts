import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import ts from "typescript"
import { describe, expect, it } from "vitest"

// The domain (src/domain) is pure: rules over values, with time and ids passed in
// (docs/architecture.md). It keeps no state of its own between calls: no module-level `let` or
// `var`, and no module-level Map, Set or array made to be written (a `Readonly…` table is a
// constant). Memos and hand-tuned caches live in src/platform, on the documented hot paths. Nor
// does it import Effect: its callers decide how a rule runs.

const domain = join(import.meta.dirname, "../../src/domain")
const files = readdirSync(domain).filter((name) => name.endsWith(".ts"))

const mutableCollection = /^new (Map|Set|WeakMap|WeakSet|Array)\b|^\[\]$/

const moduleState = (file: string): Array<string> => {
  const text = readFileSync(join(domain, file), "utf8")
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true)
  const found: Array<string> = []
  for (const statement of source.statements) {
    if (!ts.isVariableStatement(statement)) continue
    const flags = statement.declarationList.flags
    const constant = (flags & ts.NodeFlags.Const) !== 0
    for (const declaration of statement.declarationList.declarations) {
      const name = declaration.name.getText(source)
      if (!constant) {
        found.push(`${file}: module-level ${flags & ts.NodeFlags.Let ? "let" : "var"} ${name}`)
        continue
      }
      const initializer = declaration.initializer?.getText(source) ?? ""
      const type = declaration.type?.getText(source) ?? ""
      if (mutableCollection.test(initializer) && !type.startsWith("Readonly")) {
        found.push(`${file}: module-level ${name} = ${initializer.slice(0, 40)} (writable)`)
      }
    }
  }
  return found
}

describe("the domain keeps no state of its own", () => {
  it("no module-level let, var or writable collection in src/domain", () => {
    expect(files.length).toBeGreaterThan(5)
    expect(files.flatMap(moduleState)).toEqual([])
  })

  it("src/domain does not import Effect", () => {
    const importers = files.filter((file) => /from "effect(\/[^"]*)?"/.test(readFileSync(join(domain, file), "utf8")))
    expect(importers).toEqual([])
  })

  it("the check sees what it looks for", () => {
    const probe = (text: string) => {
      const source = ts.createSourceFile("probe.ts", text, ts.ScriptTarget.Latest, true)
      return source.statements.filter(ts.isVariableStatement).length
    }
    expect(probe("let x = 1\nconst m = new Map()")).toBe(2)
    expect(mutableCollection.test("new Map<string, number>()")).toBe(true)
    expect(mutableCollection.test("[]")).toBe(true)
    expect(mutableCollection.test("Object.freeze([1])")).toBe(false)
  })
})
