/**
 * A harness load on the virtual clock against a fake service, for the tests of load shapes,
 * warm-up, objectives and the capacity search: no sockets, no sleeps, no real time.
 */
import { VirtualClock } from "../../bench/harness/Clock.ts"
import type { WireRequest } from "../../bench/harness/Contract.ts"
import { type LoadModel, runLoad } from "../../bench/harness/LoadModel.ts"
import { Recorder } from "../../bench/harness/Recorder.ts"
import { recordingTransport, type WireClient, type WireOutcome } from "../../bench/harness/Transport.ts"

/** The virtual clock's start: a non-zero origin catches code that confuses offsets with times. */
export const originMs = 1_000

export interface FakeService {
  /** Ms of work per request. */
  readonly serviceMs: number
  /** Requests worked on at once (default: unbounded). */
  readonly servers?: number
  /** The status of the request answered at `atMs` (ms from the origin; default 200). */
  readonly statusAt?: (atMs: number, path: string) => number
  /** Nothing is answered before this (ms from the origin): a cold start. */
  readonly freeFromMs?: number
}

/** A service on the virtual clock: `servers` at a time, `serviceMs` each. */
export const fakeService = (clock: VirtualClock, service: FakeService): WireClient => {
  let busy = 0
  const queue: Array<() => void> = []
  return {
    send: async (request: WireRequest): Promise<WireOutcome> => {
      const waitMs = (service.freeFromMs ?? 0) - (clock.now() - originMs)
      if (waitMs > 0) await clock.sleep(waitMs)
      if (busy >= (service.servers ?? Infinity)) await new Promise<void>((turn) => queue.push(turn))
      else busy++
      await clock.sleep(service.serviceMs)
      const next = queue.shift()
      if (next === undefined) busy--
      else next()
      return {
        _tag: "Answered",
        response: { status: service.statusAt?.(clock.now() - originMs, request.path) ?? 200, headers: {}, body: "{}" }
      }
    },
    close: () => {}
  }
}

export interface Drive {
  readonly model: LoadModel
  readonly durationMs: number
  readonly service: FakeService
  /** The path each script requests (default /healthz), by the script's index. */
  readonly pathOf?: (index: number) => string
  readonly maxRequests?: number
  readonly shouldStop?: (recorder: Recorder) => boolean
  readonly recorder?: (startMs: number) => Recorder
}

export const drive = async (options: Drive) => {
  const clock = new VirtualClock(originMs)
  const recorder = options.recorder?.(clock.now()) ?? new Recorder(clock.now())
  const transport = recordingTransport(fakeService(clock, options.service), clock, { recorder }, 1_000_000)
  const intended: Array<number> = []
  const outcome = await clock.run(runLoad(
    {
      model: options.model,
      durationMs: options.durationMs,
      maxRequests: options.maxRequests ?? null,
      seed: 1,
      maxConcurrentScripts: 1_000_000,
      requestsPerScript: 1,
      ...(options.shouldStop === undefined ? {} : { shouldStop: () => options.shouldStop!(recorder) })
    },
    clock,
    async (index, intendedStartMs) => {
      intended.push(intendedStartMs - originMs)
      await transport.send(
        { method: "GET", path: options.pathOf?.(index) ?? "/healthz", headers: {}, body: null },
        intendedStartMs
      )
    },
    () => transport.sent()
  ))
  return { outcome, intended, recorder, figures: recorder.finish(clock.now()), clock }
}
