import { type ChildProcess, spawn } from "node:child_process"
import { readdirSync, readFileSync } from "node:fs"
import { connect } from "node:net"
import { resolve } from "node:path"
import { afterAll, expect, it } from "vitest"
import { freePort } from "../../src/platform/Database.ts"
import { eventually } from "../support/app.ts"
import { freshDatabase } from "../support/database.ts"
import { serviceEnv } from "../support/service.ts"

// `npm start` as an operator's supervisor runs it: a SIGTERM sent to npm must stop the service.
// npm forwards the signal to the shell it runs the script in; unless that shell has become node
// (`exec`), node never hears it and keeps serving as an orphan once npm and the shell are gone.

const root = resolve(import.meta.dirname, "../..")
let npm: ChildProcess | undefined

/** The processes of a process group (npm's, started detached): their pids, from /proc. */
const groupMembers = (groupId: number): Array<number> => {
  const members: Array<number> = []
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      // Fields after the command's closing parenthesis: state, ppid, pgrp, ...
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8")
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
      if (Number(fields[2]) === groupId && fields[0] !== "Z") members.push(Number(entry))
    } catch { /* ended while listed */ }
  }
  return members
}

const commandOf = (pid: number) => {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ")
  } catch {
    return ""
  }
}

/** Whether something accepts connections on the port. */
const listening = (port: number) =>
  new Promise<boolean>((done) => {
    const socket = connect({ port, host: "127.0.0.1" })
    socket.once("connect", () => {
      socket.destroy()
      done(true)
    })
    socket.once("error", () => done(false))
  })

afterAll(() => {
  // Whatever the outcome, nothing of this test outlives it: the whole group, by its id.
  if (npm?.pid !== undefined) {
    try {
      process.kill(-npm.pid, "SIGKILL")
    } catch { /* already gone */ }
  }
})

it("SIGTERM to npm start's own process stops the service: the port closes and no node process is left", async () => {
  const databaseUrl = await freshDatabase("npm_start")
  const port = await freePort()
  let output = ""
  // Detached: npm leads a process group of its own, so every process it started can be found.
  npm = spawn("npm", ["start"], {
    cwd: root,
    env: serviceEnv(databaseUrl, { PORT: String(port) }),
    stdio: ["ignore", "pipe", "pipe"],
    detached: true
  })
  npm.stdout!.on("data", (chunk: Buffer) => (output += chunk.toString()))
  npm.stderr!.on("data", (chunk: Buffer) => (output += chunk.toString()))
  const npmExited = new Promise<void>((done) => npm!.once("exit", () => done()))
  // Closed once every writer is gone, npm and the service alike: then the output is all read.
  const outputClosed = new Promise<void>((done) => npm!.stderr!.once("close", () => done()))
  const groupId = npm.pid!
  await eventually(async () => {
    if (npm!.exitCode !== null) throw new Error(`npm start exited ${npm!.exitCode}: ${output}`)
    const ready = await fetch(`http://127.0.0.1:${port}/readyz`).catch(() => null)
    return ready?.status === 200 ? true : undefined
  }, { timeoutMs: 60_000, intervalMs: 100, what: "npm start to serve" })
  // The service itself (without `exec` the shell's command line names it too).
  const nodes = groupMembers(groupId).filter((pid) =>
    /^(\S*\/)?node /.test(commandOf(pid)) && commandOf(pid).includes("src/main.ts serve")
  )
  expect(nodes.length).toBe(1)

  process.kill(groupId, "SIGTERM")
  await npmExited
  await eventually(async () => ((await listening(port)) ? undefined : true), {
    timeoutMs: 20_000,
    intervalMs: 100,
    what: "the port to close"
  })
  await eventually(async () => (groupMembers(groupId).length === 0 ? true : undefined), {
    timeoutMs: 20_000,
    intervalMs: 100,
    what: "npm start's processes to end"
  })
  await outputClosed
  // The service stopped the way a stop is logged (src/main.ts, src/http/Drain.ts), not killed.
  expect(output).toContain("shutting down: done")
}, 120_000)
