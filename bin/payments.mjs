#!/usr/bin/env node
// `npx payments ...` and `npm run payments -- ...` start here. The command runs from a bundle of
// src/main.ts (scripts/bundle.mjs), rebuilt on the first run after any change to src/ or to the
// installed packages and cached in .data/cli-build/; through tsx, every command spent seconds
// loading modules before its first statement. A checkout where .data/ cannot be written runs the
// TypeScript through tsx instead. Stack traces point into the bundle: run with
// NODE_OPTIONS=--enable-source-maps to map them back to the sources.
import path from "node:path"
import { pathToFileURL } from "node:url"
import { checkout, importBundle, prepareBundle } from "../scripts/bundle.mjs"

const unwritable = new Set(["EACCES", "EPERM", "EROFS"])

let outdir
try {
  outdir = await prepareBundle({ name: "cli-build", label: "payments", entries: { main: "src/main.ts" }, directories: ["src"], launcher: import.meta.filename })
} catch (error) {
  if (!unwritable.has(error?.code)) throw error
  console.error(`payments: cannot write ${path.join(checkout, ".data")} (${error.code}): running the TypeScript through tsx, which starts slower`)
}
if (outdir === undefined) {
  const { register } = await import("tsx/esm/api")
  register()
  await import(pathToFileURL(path.join(checkout, "src", "main.ts")).href)
} else {
  await importBundle(outdir, "main")
}
