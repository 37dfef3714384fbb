import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import ts from "typescript"
import { describe, expect, it } from "vitest"

// Functions stay short enough to read in one sitting, and calls say what their arguments are.
// In src/, sim/ and bench/ no function has more than 100 lines of its own, and none takes 6 or
// more parameters (more than a few become an options object, as TigerBeetle's style has it).
//
// A function's own lines are its lines less those of the functions written inside it: a service
// constructor that defines thirty small closures is not a long function, a 300-line body is. A
// data table (a literal list of rows) is not a function, so it never counts: a long `switch` of
// independent cases is better written as such a table of small functions.

const root = join(import.meta.dirname, "../..")
const roots = ["src", "sim", "bench"] as const
const maxOwnLines = 100
const maxParameters = 5

/**
 * Functions left as they are for now, each with its reason, as `file#name` (a count would go
 * stale at every edit; a name does not). The list only shrinks.
 */
const exceptions: ReadonlyMap<string, string> = new Map([
  // The load driver's per-request call (bench/harness, a measured hot path): an options object
  // would be an allocation on every request the harness sends.
  ["bench/harness/Recorder.ts#record", "6 parameters"]
])

interface Finding {
  readonly at: string
  readonly key: string
  readonly problem: string
}

/** The name a reader would search for: the function's own, or the binding, property or call it is written in. */
const nameOf = (node: ts.SignatureDeclaration, source: ts.SourceFile): string => {
  if (ts.isConstructorDeclaration(node)) {
    return ts.isClassLike(node.parent) && node.parent.name ? `${node.parent.name.text}.constructor` : "constructor"
  }
  if (node.name !== undefined) return node.name.getText(source)
  for (let at: ts.Node = node.parent; !ts.isSourceFile(at); at = at.parent) {
    if (
      ts.isVariableDeclaration(at) || ts.isPropertyAssignment(at) || ts.isPropertyDeclaration(at) ||
      ts.isFunctionDeclaration(at) || ts.isMethodDeclaration(at)
    ) {
      return at.name?.getText(source) ?? "(anonymous)"
    }
    if (!ts.isCallExpression(at) && !ts.isParenthesizedExpression(at) && !ts.isAsExpression(at)) break
  }
  return "(anonymous)"
}

/** The functions of one source text over the limits. */
const oversized = (file: string, text: string): Array<Finding> => {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true)
  const line = (position: number) => source.getLineAndCharacterOfPosition(position).line
  const found: Array<Finding> = []
  // The lines of the functions written inside the one being measured, one counter per level.
  const nested: Array<number> = []
  const visit = (node: ts.Node): void => {
    if (!ts.isFunctionLike(node) || !("body" in node) || node.body === undefined) {
      ts.forEachChild(node, visit)
      return
    }
    const first = line(node.getStart(source))
    const lines = line(node.end) - first + 1
    const outer = nested.length - 1
    if (outer >= 0) nested[outer] = nested[outer]! + lines
    nested.push(0)
    ts.forEachChild(node, visit)
    const own = lines - nested.pop()!
    const name = nameOf(node, source)
    const at = `${file}:${first + 1} ${name}`
    const key = `${file}#${name}`
    if (own > maxOwnLines) found.push({ at, key, problem: `${own} own lines (at most ${maxOwnLines})` })
    if (node.parameters.length > maxParameters) {
      found.push({ at, key, problem: `${node.parameters.length} parameters (at most ${maxParameters})` })
    }
  }
  visit(source)
  return found
}

const sourceFiles = (directory: string): Array<string> =>
  readdirSync(join(root, directory), { withFileTypes: true }).flatMap((entry) => {
    const path = `${directory}/${entry.name}`
    if (entry.isDirectory()) return entry.name === "node_modules" || entry.name === "results" ? [] : sourceFiles(path)
    return entry.name.endsWith(".ts") ? [path] : []
  })

describe("function sizes", () => {
  it("the check measures own lines and counts parameters", () => {
    const body = (lines: number) => Array.from({ length: lines }, (_, i) => `  const v${i} = ${i}`).join("\n")
    const text = [
      `export const long = () => {\n${body(100)}\n}`,
      `export const host = () => {\n${body(50)}\n  const inner = () => {\n${body(60)}\n  }\n  return inner\n}`,
      `export function wide(a: number, b: number, c: number, d: number, e: number, f: number) {}`,
      `export const run = Effect.gen(function*() {\n${body(101)}\n})`,
      `class C { constructor(a: 1, b: 2, c: 3, d: 4, e: 5, f: 6) {} }`
    ].join("\n")
    expect(oversized("probe.ts", text).map((finding) => `${finding.at}: ${finding.problem}`)).toEqual([
      "probe.ts:1 long: 102 own lines (at most 100)",
      "probe.ts:218 wide: 6 parameters (at most 5)",
      "probe.ts:219 run: 103 own lines (at most 100)",
      "probe.ts:322 C.constructor: 6 parameters (at most 5)"
    ])
  })

  const files = roots.flatMap(sourceFiles)
  const findings = files.flatMap((file) => oversized(file, readFileSync(join(root, file), "utf8")))

  it(`no function in ${roots.join("/, ")}/ has over ${maxOwnLines} own lines or more than ${maxParameters} parameters`, () => {
    expect(files.length).toBeGreaterThan(100)
    const unexcused = findings.filter((finding) => !exceptions.has(finding.key))
    expect(unexcused.map((finding) => `${finding.at}: ${finding.problem}`)).toEqual([])
  })

  it("every exception still names a function over the limits", () => {
    const keys = new Set(findings.map((finding) => finding.key))
    expect([...exceptions.keys()].filter((key) => !keys.has(key))).toEqual([])
  })
})
