import { existsSync, readdirSync, readFileSync } from "node:fs"
import { dirname, join, normalize } from "node:path"
import ts from "typescript"
import { describe, expect, it } from "vitest"

// The simulator's laws are independent oracles: each computes what should be from the record and
// the documented rules by itself (sim/checks: the auditor, the settlement, dispute and key laws;
// the webhook laws of sim/world/Endpoints.ts), never by calling the code under test. A law that
// imports a rule of src/domain or src/services shares its bugs: when the rule is wrong, the law
// expects the wrong thing and agrees (a settlement law that asked `isSettleable` what is owed a
// sweep would learn from a broken `isSettleable` that nothing is). So a file of the laws may take from src/domain and src/services only
//
//   - types (`import type`, or `type` on every name imported), which carry no behaviour, and
//   - the documented constants of `allowedValues` below, each a plain value that a document of
//     docs/ states by name (the guard checks that the document names it).
//
// Everything else a law needs (a cut-off time, a fee, the fraud model's features, the minor units
// of a currency) it writes out again from the documentation, as a small reference model in
// sim/checks. A law may read the system under test (the memory store's balances are what the API
// reports: src/store is not guarded); it may not ask it what is right. The files the laws import
// from sim/ are held to the same rule (a helper in sim/world cannot launder a domain rule into a
// law), except the two tools of sim/checks that run simulations rather than judge them.

const root = join(import.meta.dirname, "../..")

/** The guarded folders of src/: the rules under test. */
const guardedPrefixes = ["src/domain/", "src/services/", "src/workers/"]

/**
 * Values a law may import from src/domain or src/services: by file, each name with the document
 * that states it. None today: every constant the laws need is written out again in sim/checks
 * with the document it comes from. An entry belongs here only for a plain constant (no function,
 * no object with behaviour) whose value the document gives.
 */
const allowedValues: Readonly<Record<string, Readonly<Record<string, string>>>> = {}

/** Files of sim/checks that run simulations (shrinking, replay files) rather than judge one: not followed from a law. */
const tools = new Set(["sim/checks/Shrink.ts", "sim/checks/Replay.ts"])

/** The law files: every file of sim/checks, the webhook laws of sim/world/Endpoints.ts, and the harness's scenario laws. */
const lawFiles = (): Array<string> =>
  [
    ...readdirSync(join(root, "sim/checks")).filter((name) => name.endsWith(".ts")).map((name) => `sim/checks/${name}`),
    "sim/world/Endpoints.ts",
    "bench/harness/scenarios/merchants.ts"
  ].sort()

interface Imported {
  readonly target: string
  /** The value names taken (`*` a namespace, `default` a default import, `(module)` a side-effect or dynamic import). */
  readonly values: ReadonlyArray<string>
}

/** A relative specifier of `file` as a path from the checkout's root (`.js` naming `.ts` as TypeScript allows). */
const resolve = (file: string, specifier: string) => {
  const target = normalize(join(dirname(file), specifier)).split("\\").join("/")
  return existsSync(join(root, target)) ? target : target.replace(/\.js$/, ".ts")
}

/** What a file imports, relative imports only, with the value names each takes (type-only names left out). */
const importsOf = (file: string): Array<Imported> => importsOfText(file, readFileSync(join(root, file), "utf8"))

/** `importsOf` of a text said to be `file`. */
const importsOfText = (file: string, text: string): Array<Imported> => {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true)
  const found: Array<Imported> = []
  const add = (specifier: ts.Expression | undefined, values: ReadonlyArray<string>) => {
    if (specifier === undefined || !ts.isStringLiteral(specifier) || !specifier.text.startsWith(".")) return
    found.push({ target: resolve(file, specifier.text), values })
  }
  const visit = (node: ts.Node) => {
    if (ts.isImportDeclaration(node)) {
      const clause = node.importClause
      if (clause === undefined) add(node.moduleSpecifier, ["(module)"])
      else if (clause.isTypeOnly) add(node.moduleSpecifier, [])
      else {
        const values: Array<string> = []
        if (clause.name !== undefined) values.push("default")
        const bindings = clause.namedBindings
        if (bindings !== undefined && ts.isNamespaceImport(bindings)) values.push("*")
        if (bindings !== undefined && ts.isNamedImports(bindings)) {
          for (const element of bindings.elements) {
            if (!element.isTypeOnly) values.push((element.propertyName ?? element.name).text)
          }
        }
        add(node.moduleSpecifier, values)
      }
    } else if (ts.isExportDeclaration(node) && node.moduleSpecifier !== undefined && !node.isTypeOnly) {
      const clause = node.exportClause
      const values = clause === undefined || !ts.isNamedExports(clause)
        ? ["*"]
        : clause.elements.filter((e) => !e.isTypeOnly).map((e) => (e.propertyName ?? e.name).text)
      add(node.moduleSpecifier, values)
    } else if (
      ts.isCallExpression(node) &&
      (node.expression.kind === ts.SyntaxKind.ImportKeyword ||
        (ts.isIdentifier(node.expression) && node.expression.text === "require"))
    ) {
      add(node.arguments[0], ["(module)"])
    }
    ts.forEachChild(node, visit)
  }
  visit(source)
  return found
}

/** The values a file takes from the guarded folders that are not allowed, as messages. */
const refusedIn = (file: string, imports: ReadonlyArray<Imported> = importsOf(file)): Array<string> =>
  imports.flatMap(({ target, values }) => {
    if (!guardedPrefixes.some((prefix) => target.startsWith(prefix))) return []
    const allowed = allowedValues[target] ?? {}
    return values.filter((name) => !Object.hasOwn(allowed, name)).map((name) => `${file} takes ${name} from ${target}`)
  })

/** The files of sim/ a law reaches through value imports (itself included), each with the way it is reached. */
const reachedFrom = (law: string): Map<string, Array<string>> => {
  const reached = new Map<string, Array<string>>([[law, [law]]])
  const queue = [law]
  while (queue.length > 0) {
    const file = queue.shift()!
    for (const { target, values } of importsOf(file)) {
      if (values.length === 0 || !target.startsWith("sim/") || tools.has(target) || reached.has(target)) continue
      reached.set(target, [...reached.get(file)!, target])
      queue.push(target)
    }
  }
  return reached
}

describe("the simulator's laws are independent oracles", () => {
  it("no law imports a rule of src/domain or src/services (types and documented constants only), nor reaches one through sim/", () => {
    // Each refused import once, with the first way a law reaches its file.
    const refused = new Map<string, ReadonlyArray<string>>()
    for (const law of lawFiles()) {
      // The harness's scenario file holds its laws beside the actors it drives (the simulator's
      // workload, the in-process card network): the file itself is held to the rule, what it drives is not followed.
      const reached = tools.has(law) || law.startsWith("bench/") ? new Map([[law, [law]]]) : reachedFrom(law)
      for (const [file, way] of reached) {
        for (const message of refusedIn(file)) if (!refused.has(message)) refused.set(message, way)
      }
    }
    expect(
      [...refused].map(([message, way]) => (way.length > 1 ? `${message} (reached from ${way.join(" → ")})` : message))
    ).toEqual([])
  })

  it("every allowed value is a constant a document names", () => {
    const docs = readdirSync(join(root, "docs")).filter((name) => name.endsWith(".md")).map((name) =>
      readFileSync(join(root, "docs", name), "utf8")
    ).join("\n")
    for (const [file, names] of Object.entries(allowedValues)) {
      expect(existsSync(join(root, file))).toBe(true)
      for (const [name, document] of Object.entries(names)) {
        expect(readFileSync(join(root, document), "utf8")).toContain(name)
        expect(docs).toContain(name)
      }
    }
  })

  it("catches what it is for: a rule of src/domain or src/services taken by value, whatever the form", () => {
    // A law of the old kind, as a text: the guard's own reading of it.
    const text = [
      `import type { Payment } from "../../src/domain/Payment.ts"`,
      `import { type Change, isSettleable } from "../../src/domain/Payment.ts"`,
      `import * as Payments from "../../src/services/Payments.ts"`,
      `export { settle } from "../../src/domain/Payment.ts"`,
      `const later = () => import("../../src/domain/Ledger.ts")`,
      `import { nextCutoffMs } from "../../src/workers/Workers.ts"`
    ].join("\n")
    expect(refusedIn("sim/checks/Old.ts", importsOfText("sim/checks/Old.ts", text))).toEqual([
      "sim/checks/Old.ts takes isSettleable from src/domain/Payment.ts",
      "sim/checks/Old.ts takes * from src/services/Payments.ts",
      "sim/checks/Old.ts takes settle from src/domain/Payment.ts",
      "sim/checks/Old.ts takes (module) from src/domain/Ledger.ts",
      "sim/checks/Old.ts takes nextCutoffMs from src/workers/Workers.ts"
    ])
    // The law files really are read: the auditor's imports from src/domain are seen (and every
    // name they take is a type), and the walk follows its value imports into sim/.
    expect(
      importsOf("sim/checks/Auditor.ts").some((i) => i.target === "src/domain/Payment.ts" && i.values.length === 0)
    ).toBe(true)
    expect(reachedFrom("sim/checks/Auditor.ts").has("sim/checks/PlantedBugs.ts")).toBe(true)
  })
})
