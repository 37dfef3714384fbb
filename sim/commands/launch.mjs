// `npm run sim`, `npm run sim:sweep` and `npm run sim:bench` start here: `node sim/commands/launch.mjs main|sweep|bench [args]`.
//
// The simulator runs from a bundle of the commands beside this file, main.ts, Sweep.ts,
// sweep-worker.ts and bench.ts (scripts/bundle.mjs: built with esbuild on the first run after a
// change to src/, sim/ or the installed packages, cached in .data/sim-build/). It starts in
// ~0.3 s instead of ~1.4 s through tsx; a 1,500-payment seed simulates in ~3 s.
//
// The bundle runs the same code as the TypeScript (same modules, same order of evaluation), so
// a seed gives the same trace hash either way; test/sim runs the TypeScript through vitest.
// Stack traces point into the bundle; set SIM_SOURCE_MAPS=1 to map them back to the sources.
import { importBundle, prepareBundle } from "../../scripts/bundle.mjs"

const entries = { main: "sim/commands/main.ts", sweep: "sim/commands/Sweep.ts", "sweep-worker": "sim/commands/sweep-worker.ts", bench: "sim/commands/bench.ts" }

const [command, ...rest] = process.argv.slice(2)
if (command !== "main" && command !== "sweep" && command !== "bench") {
  console.error("usage: node sim/commands/launch.mjs main|sweep|bench [arguments]")
  process.exit(2)
}
if (process.env.SIM_SOURCE_MAPS === "1") process.setSourceMapsEnabled(true)
const outdir = await prepareBundle({ name: "sim-build", label: "sim", entries, directories: ["src", "sim"], launcher: import.meta.filename })
process.argv = [process.argv[0], process.argv[1], ...rest]
const module = await importBundle(outdir, command)
await module.main()
