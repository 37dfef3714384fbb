#!/usr/bin/env node
/**
 * Completes package-lock.json with the other platforms' optional packages that this machine's
 * registry does not serve (native builds for macOS, Windows, musl, ...). npm leaves them out
 * of the lock when it cannot fetch their metadata, and `npm ci` then refuses the lock as out
 * of sync (npm/cli#9846). Each missing package gets an entry with the os/cpu/libc its name
 * declares, so npm skips it on every platform it does not belong to and never fetches it.
 * Run after changing dependencies: `node scripts/complete-lockfile.mjs`.
 */
import { readFileSync, writeFileSync } from "node:fs"

const path = new URL("../package-lock.json", import.meta.url)
const lock = JSON.parse(readFileSync(path, "utf8"))
const packages = lock.packages

const osNames = ["darwin", "linux", "win32", "android", "freebsd", "openbsd", "openharmony", "netbsd", "sunos", "aix"]
const cpuNames = ["arm64", "x64", "ia32", "arm", "loong64", "ppc64", "riscv64", "s390x", "mips64el", "wasm32"]

const platformOf = (name) => {
  const tokens = name.split("/").pop().split("-")
  const os = tokens.find((t) => osNames.includes(t))
  const cpu = tokens.find((t) => cpuNames.includes(t))
  const libc = tokens.some((t) => t.startsWith("musl")) ? "musl" : tokens.some((t) => t === "gnu" || t.startsWith("gnueabi")) ? "glibc" : undefined
  return { os, cpu, libc }
}

let added = 0
for (const [location, entry] of Object.entries(packages)) {
  for (const [name, version] of Object.entries(entry.optionalDependencies ?? {})) {
    const candidates = [`${location === "" ? "" : `${location}/`}node_modules/${name}`, `node_modules/${name}`]
    if (candidates.some((key) => packages[key] !== undefined)) continue
    const { os, cpu, libc } = platformOf(name)
    // Only platform builds are completed; anything else missing is a real problem for npm to report.
    if (os === undefined || cpu === undefined) continue
    packages[`node_modules/${name}`] = {
      version,
      cpu: [cpu],
      ...(entry.dev ? { dev: true } : {}),
      ...(libc === undefined ? {} : { libc: [libc] }),
      optional: true,
      os: [os]
    }
    added++
  }
}

lock.packages = Object.fromEntries(Object.entries(packages).sort(([a], [b]) => (a === "" ? -1 : b === "" ? 1 : a < b ? -1 : a > b ? 1 : 0)))
writeFileSync(path, JSON.stringify(lock, null, 2) + "\n")
console.log(`complete-lockfile: added ${added} platform entries`)
