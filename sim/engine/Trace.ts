import { createHash, type Hash } from "node:crypto"
import { isoAt } from "../../src/platform/IsoTime.ts"

/**
 * The ordered trace of a run: every request and response, every committed payment event, every
 * crash. Its SHA-256 is the run's fingerprint (same seed and options, same hash, any machine);
 * the last lines are kept for failure reports.
 */
export class Trace {
  private readonly hash: Hash = createHash("sha256")
  private readonly tail: Array<string> = []
  private tailStart = 0
  lines = 0

  constructor(private readonly tailSize: number, private readonly clockMs: () => number) {}

  /** The last time stamped and its text: the lines of one instant share one conversion. */
  private stampMs = Number.NaN
  private stamp = ""

  record(line: string) {
    const nowMs = this.clockMs()
    if (nowMs !== this.stampMs) {
      this.stampMs = nowMs
      // `new Date(nowMs).toISOString()`, the same string, without a Date and a runtime call.
      this.stamp = isoAt(nowMs)
    }
    const stamped = `${this.stamp} ${line}`
    this.hashed(`${stamped}\n`)
    this.lines++
    if (this.tail.length < this.tailSize) this.tail.push(stamped)
    else if (this.tailSize > 0) {
      this.tail[this.tailStart] = stamped
      this.tailStart = (this.tailStart + 1) % this.tailSize
    }
  }

  /** Adds a line to the hash only (the final state), leaving the tail to the run's last moments. */
  fingerprint(line: string) {
    this.hashed(`${line}\n`)
    this.lines++
  }

  /**
   * Lines wait in one string and reach the hash 64 KiB at a time: SHA-256 of the concatenation is
   * the same however it is cut, and one `update` a line (a call into the native hash, ~4 a
   * payment) cost more than hashing the text itself.
   */
  private pending = ""

  private hashed(text: string) {
    this.pending += text
    if (this.pending.length >= 65_536) this.flush()
  }

  private flush() {
    if (this.pending.length === 0) return
    this.hash.update(this.pending)
    this.pending = ""
  }

  lastLines(): ReadonlyArray<string> {
    return [...this.tail.slice(this.tailStart), ...this.tail.slice(0, this.tailStart)]
  }

  digest(): string {
    this.flush()
    return this.hash.copy().digest("hex")
  }
}
