import { Context, Effect } from "effect"
import type { HttpMethod } from "effect/http"
import type { SimResponse } from "../../../sim/world/Http.ts"
import type { ClientPort, IssuedKey, Merchant, Pace } from "../../../sim/world/Workload.ts"
import type { Transport, WireRequest } from "../Contract.ts"

/**
 * The merchants' port to a real service (sim/world/Workload.ts `ClientPort`) over the harness's
 * Transport, under real time: the same scripts the simulator runs in-process, one fiber each.
 */

/** What a script's fiber carries (`scriptContext`): when its first request was meant to start, and what it sent. */
export interface ScriptContext {
  /** The load model's intended start of the script's next request (then null: measured from when sent). */
  intendedStartMs: number | null
  /** `METHOD path -> status`, oldest first (bounded), for a violation's story. */
  readonly log: Array<string>
}

/** The script context of the running fiber (null outside a script: key rotations). */
export const scriptContext = Context.Reference<ScriptContext | null>("bench/harness/ScriptContext", {
  defaultValue: () => null
})

const maximumLogLines = 60

/** A request sent whose answer is awaited later (`awaitEither`). */
export interface HttpPending {
  settled: boolean
  response: SimResponse | null
  wake: (() => void) | null
}

export interface HttpPortOptions {
  readonly transport: Transport
  /** A spare key of each merchant (by merchant id), made at setup, that no script rotates: key recovery. */
  readonly spareKeys: ReadonlyMap<string, string>
  /** Sees every answer a script's request got (not the requests with no answer). */
  readonly onAnswer?: (request: WireRequest, response: SimResponse) => void
}

const lineOf = (request: WireRequest, response: SimResponse | null) => {
  const key = request.headers["x-idempotency-key"]
  return `${request.method} ${request.path}${key === undefined ? "" : ` key=${key}`} -> ${
    response === null ? "no answer" : response.status
  }`
}

export const makeHttpPort = (options: HttpPortOptions): ClientPort<WireRequest, HttpPending> => {
  const { transport } = options
  /** Sends now, with the script's intended start (its first request only), and logs the answer in the script's story. */
  const dispatch = (
    request: WireRequest,
    context: ScriptContext | null,
    done: (response: SimResponse | null) => void
  ) => {
    const intended = context === null ? null : context.intendedStartMs
    if (context !== null) context.intendedStartMs = null
    transport.send(request, intended).then(
      (response) => {
        if (context !== null && context.log.length < maximumLogLines) context.log.push(lineOf(request, response))
        if (response !== null) options.onAnswer?.(request, response)
        done(response)
      },
      () => {
        if (context !== null && context.log.length < maximumLogLines) context.log.push(lineOf(request, null))
        done(null)
      }
    )
  }
  const port: ClientPort<WireRequest, HttpPending> = {
    request: (method: HttpMethod.HttpMethod, path, apiKey, body, extra) => {
      const headers: Record<string, string> = { ...extra }
      if (apiKey !== null) headers["authorization"] = `Bearer ${apiKey}`
      if (body !== null) headers["content-type"] = "application/json"
      return { method, path, headers, body }
    },
    send: (request, then) =>
      Effect.withFiber((fiber) => {
        const context = fiber.getRef(scriptContext)
        return Effect.callback((resume) =>
          dispatch(request, context, (response) => resume(Effect.suspend(() => then(response))))
        )
      }),
    open: (request) =>
      Effect.withFiber((fiber) => {
        const context = fiber.getRef(scriptContext)
        return Effect.sync(() => {
          const pending: HttpPending = { settled: false, response: null, wake: null }
          dispatch(request, context, (response) => {
            pending.response = response
            pending.settled = true
            if (pending.wake !== null) pending.wake()
          })
          return pending
        })
      }),
    awaitEither: (a, b) =>
      Effect.suspend(() => {
        if (a.settled) return Effect.succeed(a)
        if (b !== null && b.settled) return Effect.succeed(b)
        return Effect.callback<HttpPending>((resume) => {
          const wake = (first: HttpPending) => () => {
            a.wake = null
            if (b !== null) b.wake = null
            resume(Effect.succeed(first))
          }
          a.wake = wake(a)
          if (b !== null) b.wake = wake(b)
        })
      }),
    answerOf: (pending) => pending.response,
    isUp: true,
    // A merchant locked out by a rotation whose answer was lost: its spare key (made at setup,
    // never rotated) creates a new key, as an operator would with the CLI.
    issueKey: (merchant: Merchant) =>
      Effect.suspend(() => {
        const spare = options.spareKeys.get(merchant.id)
        if (spare === undefined) return Effect.succeed(null)
        const request = port.request(
          "POST",
          "/api/v1/api_keys",
          spare,
          JSON.stringify({ name: "harness recovered" }),
          {}
        )
        return port.send(request, (response): Effect.Effect<IssuedKey | null> => {
          if (response === null || response.status !== 201) return Effect.succeed(null)
          const issued = (JSON.parse(response.body) as { api_key: { id: string; key: string } }).api_key
          return Effect.succeed({ record: { id: issued.id }, secret: issued.key })
        })
      })
  }
  return port
}

/**
 * Real time for the merchants: a story's pauses (minutes to hours in the simulator) scaled by
 * `timeScale` and bounded by `maxThinkMs`, a client's retry waits bounded by `maxBackoffMs`; the
 * gaps between a merchant's key rotations scaled alone (a day on average becomes ~3 min at
 * 1/500), so rotations stay as rare beside the payments as in the simulator.
 */
export const scaledPace = (timeScale: number, maxThinkMs: number, maxBackoffMs: number): Pace => ({
  think: (ms) => Effect.sleep(Math.min(ms * timeScale, maxThinkMs)),
  backoff: (ms) => Effect.sleep(Math.min(ms, maxBackoffMs)),
  idle: (ms) => Effect.sleep(ms * timeScale)
})
