import { execFileSync } from "node:child_process"
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { prepareBundle } from "../../scripts/bundle.mjs"

// `npx payments` and `npm run sim` run bundles cached under .data/ (scripts/bundle.mjs): a bundle
// must never run code older than the sources. Here on a small project of its own.

const project = mkdtempSync(join(tmpdir(), "payments-bundle-"))
afterAll(() => rmSync(project, { recursive: true, force: true }))

const write = (file: string, text: string) => {
  mkdirSync(join(project, file, ".."), { recursive: true })
  writeFileSync(join(project, file), text)
}
const launcher = join(project, "launch.mjs")
const prepare = () =>
  prepareBundle({
    root: project,
    name: "test-build",
    label: "test",
    entries: { main: "src/main.ts" },
    directories: ["src"],
    launcher
  })
const runs = (outdir: string) => execFileSync(process.execPath, [join(outdir, "main.mjs")], { encoding: "utf8" }).trim()

describe("the bundle cache", () => {
  it("builds once, rebuilds after any change to a source, the installed packages or the launcher, and keeps only the newest", async () => {
    write("launch.mjs", "// launcher\n")
    write("src/word.ts", `export const word: string = "one"\n`)
    write("src/main.ts", `import { word } from "./word.ts"\nconsole.log(word)\n`)

    const first = await prepare()
    expect(runs(first)).toBe("one")
    expect(await prepare()).toBe(first)

    // A file the entry imports, not the entry itself.
    write("src/word.ts", `export const word: string = "two"\n`)
    const second = await prepare()
    expect(second).not.toBe(first)
    expect(runs(second)).toBe("two")
    expect(existsSync(first)).toBe(false)

    // npm's record of the installed packages (an install that left package-lock.json alone).
    write("node_modules/.package-lock.json", `{"lockfileVersion": 3}\n`)
    const third = await prepare()
    expect(third).not.toBe(second)

    write("launch.mjs", "// launcher, changed\n")
    const fourth = await prepare()
    expect(fourth).not.toBe(third)
    expect(runs(fourth)).toBe("two")
    expect(readdirSync(join(project, ".data", "test-build"))).toEqual([fourth.split("/").at(-1)])
  })
})
