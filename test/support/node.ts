import { execFile } from "node:child_process"
import { resolve } from "node:path"

/** The checkout's root: where commands run from, as `npm run` runs them. */
export const root = resolve(import.meta.dirname, "../..")

export interface NodeRun {
  /** The exit code (1 for a process ended by a signal). */
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

/**
 * Runs `node ARGS` (this Node, from the checkout's root) to its end and collects its exit code and
 * output; never rejects. `timeoutMs` ends a run that hangs (the run then reports code 1).
 */
export const runNode = (args: ReadonlyArray<string>, options: { readonly timeoutMs?: number } = {}) =>
  new Promise<NodeRun>((done) => {
    execFile(
      process.execPath,
      args,
      {
        cwd: root,
        encoding: "utf8",
        maxBuffer: 64 * 1024 * 1024,
        ...(options.timeoutMs === undefined ? {} : { timeout: options.timeoutMs })
      },
      (error, stdout, stderr) => {
        done({ code: error === null ? 0 : typeof error.code === "number" ? error.code : 1, stdout, stderr })
      }
    )
  })

/** The trace hash a simulation's summary prints. */
export const traceHashOf = (stdout: string) => /trace \d+ lines, hash ([0-9a-f]{64})/.exec(stdout)?.[1]
