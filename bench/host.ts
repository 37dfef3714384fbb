/**
 * What the benchmarks read from the machine they run on: process CPU and memory from /proc,
 * and a wait for a service to answer. Shared by `npm run bench` and `npm run harness`.
 */
import { readdirSync, readFileSync } from "node:fs"
import { resolve } from "node:path"

/**
 * The V8 flags `npm start` gives the service (package.json's `start` script, `PAYMENTS_HEAP_MB`
 * as in the environment or its default), so a service a benchmark starts runs with the same heap
 * as a deployed one. On Node 24, `--max-old-space-size` without `--max-semi-space-size` left a
 * 64 MB young generation beside a 192 MB old space, and V8 ran a full mark-compact every 150-200 ms.
 */
export const startNodeFlags = (): Array<string> => {
  const start: string = JSON.parse(readFileSync(resolve(import.meta.dirname, "../package.json"), "utf8")).scripts.start
  // `exec`: the shell npm runs the script in becomes node, so npm's SIGTERM reaches the service.
  const words = start.replace(
    /\$\{PAYMENTS_HEAP_MB:-(\d+)\}/,
    (_, fallback: string) => process.env.PAYMENTS_HEAP_MB ?? fallback
  ).split(/\s+/)
  if (words[0] !== "exec" || words[1] !== "node" || !words.includes("--import")) {
    throw new Error(`package.json's start script is not 'exec node <flags> --import ...': ${start}`)
  }
  return words.slice(2, words.indexOf("--import"))
}

export const sleep = (ms: number) => new Promise<void>((done) => setTimeout(done, ms))

/** Polls `url` until it answers below 500, or throws after `deadlineMs`. */
export const waitFor = async (url: string, deadlineMs: number) => {
  const until = performance.now() + deadlineMs
  while (performance.now() < until) {
    try {
      if ((await fetch(url)).status < 500) return
    } catch { /* not up yet */ }
    await sleep(100)
  }
  throw new Error(`${url} did not come up`)
}

const ticksPerSecond = 100

/** CPU seconds of a process (and, with `children`, of its reaped children); 0 once it is gone. */
export const cpuSeconds = (pid: number, children = false) => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
    const own = Number(fields[11]) + Number(fields[12])
    return (children ? own + Number(fields[13]) + Number(fields[14]) : own) / ticksPerSecond
  } catch {
    return 0
  }
}

/** Resident memory of a process in MB; 0 once it is gone. */
export const rssMb = (pid: number) => {
  try {
    const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))
    return match ? Number(match[1]) / 1024 : 0
  } catch {
    return 0
  }
}

/** PostgreSQL's CPU: the postmaster, its live backends and the ones it reaped. */
export const postgresCpuSeconds = (postmasterPid: number | null) => {
  if (postmasterPid === null) return null
  let total = cpuSeconds(postmasterPid, true)
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8")
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1])
      if (ppid === postmasterPid) total += cpuSeconds(Number(entry))
    } catch { /* gone */ }
  }
  return total
}
