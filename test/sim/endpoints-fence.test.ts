import { Effect, Exit } from "effect"
import { describe, expect, it } from "vitest"
import { Auditor } from "../../sim/checks/Auditor.ts"
import { noFaults } from "../../sim/engine/Options.ts"
import { Prng } from "../../sim/engine/Prng.ts"
import { VirtualTime } from "../../sim/engine/VirtualTime.ts"
import { makeSimulatedEndpoints } from "../../sim/world/Endpoints.ts"
import type { Fence } from "../../sim/world/Service.ts"
import type { WebhookRequest } from "../../src/platform/WebhookTransport.ts"

// The endpoints check an instance's fence themselves (sim/world/Endpoints.ts `fencedBy`): a POST of an
// instance that died interrupts its caller and reaches no endpoint, even when the POST's effect
// was built before the crash. Both ways a POST is run are covered: before the clock's callback
// timer is known (a suspend) and after (one async whose registration receives the POST).

const startMs = Date.UTC(2026, 0, 5)

const request = (n: number): WebhookRequest => ({
  url: "https://m0.merchants.example/webhooks",
  body: JSON.stringify({ id: `evt_${n}` }),
  headers: {
    "x-service-event-id": `evt_${n}`,
    "x-service-delivery-id": `whd_${n}`,
    "x-service-delivery-attempt": "1",
    "x-service-signature": `t=${Math.floor(startMs / 1000)},v1=00`
  }
})

/** Fresh endpoints under virtual time, and `run`: an effect run a minute of virtual time, its exit. */
const setUp = () => {
  const time = new VirtualTime(startMs)
  const runtime = time.runtime(1)
  const auditor = new Auditor(() => time.nowMs)
  const endpoints = makeSimulatedEndpoints({
    prng: Prng.derive(1, "webhooks"),
    faults: noFaults,
    auditor,
    window: { startMs, endMs: startMs + 3_600_000 },
    nowMs: () => time.nowMs,
    lastCrashMs: () => -1,
    secretsOf: () => []
  })
  const run = <A>(effect: Effect.Effect<A>) => {
    let exit: Exit.Exit<A> | null = null
    Effect.runForkWith(runtime)(effect).addObserver((e) => (exit = e))
    time.run({ untilMs: time.nowMs + 60_000 })
    return exit as Exit.Exit<A> | null
  }
  return { endpoints, run }
}

describe("simulated endpoints behind an instance's fence", () => {
  it("a POST built before the crash and run after it interrupts and reaches nothing", () => {
    const { endpoints, run } = setUp()
    const fence: Fence = { dead: false, held: null }
    const transport = endpoints.fencedBy(fence)

    // Alive: the POST reaches the endpoint and is answered (this also makes the timer known).
    const first = run(transport.postWithin!(request(1), 10_000))
    expect(first !== null && Exit.isSuccess(first)).toBe(true)
    expect(endpoints.stats.posts).toBe(1)

    // Built while alive, run once dead: interrupted, not received.
    const built = transport.postWithin!(request(2), 10_000)
    const builtPost = transport.post(request(3))
    fence.dead = true
    const late = run(built)
    expect(late !== null && Exit.hasInterrupts(late)).toBe(true)
    const latePost = run(builtPost)
    expect(latePost !== null && Exit.hasInterrupts(latePost)).toBe(true)
    expect(endpoints.stats.posts).toBe(1)

    // The unfenced transport (and another instance's fence) still reach the endpoints.
    const other = run(endpoints.fencedBy({ dead: false, held: null }).postWithin!(request(4), 10_000))
    expect(other !== null && Exit.isSuccess(other)).toBe(true)
    expect(endpoints.stats.posts).toBe(2)
  })

  it("before the timer is known, a dead instance's POST interrupts too", () => {
    const { endpoints, run } = setUp()
    const fence: Fence = { dead: false, held: null }
    const built = endpoints.fencedBy(fence).postWithin!(request(1), 10_000)
    fence.dead = true
    const exit = run(built)
    expect(exit !== null && Exit.hasInterrupts(exit)).toBe(true)
    expect(endpoints.stats.posts).toBe(0)
  })
})

describe("a 2xx read by an instance after its pause", () => {
  it("forbids no later attempt: the replacement that took the lease over never learned of it", () => {
    const time = new VirtualTime(startMs)
    const runtime = time.runtime(1)
    const auditor = new Auditor(() => time.nowMs)
    // The pause's start is a time the endpoints forgive from, as a crash's is (sim/engine/Simulator.ts).
    let pausedAtMs = -1
    const endpoints = makeSimulatedEndpoints({
      prng: Prng.derive(1, "webhooks"),
      faults: noFaults,
      auditor,
      window: { startMs, endMs: startMs + 3_600_000 },
      nowMs: () => time.nowMs,
      lastCrashMs: () => pausedAtMs,
      secretsOf: () => []
    })
    const post = (transport: ReturnType<typeof endpoints.fencedBy>, r: WebhookRequest) =>
      Effect.runForkWith(runtime)(Effect.andThen(Effect.yieldNow, transport.postWithin!(r, 10_000)))
    const attempt = (n: number): WebhookRequest => ({
      ...request(1),
      headers: { ...request(1).headers, "x-service-delivery-attempt": String(n) }
    })
    const paused: Fence = { dead: false, held: null }
    const replacement: Fence = { dead: false, held: null }
    // An earlier POST makes the clock's callback timer known (the path that holds a paused instance's answers).
    post(endpoints.fencedBy(paused), request(0))
    time.run({ untilMs: time.nowMs + 60_000 })
    // Attempt 1 reaches the endpoint, which answers 2xx; the instance pauses before it reads the answer.
    post(endpoints.fencedBy(paused), attempt(1))
    time.run({ untilMs: time.nowMs })
    expect(endpoints.stats.posts).toBe(2)
    const acknowledged = endpoints.stats.answered2xx
    paused.held = []
    pausedAtMs = time.nowMs
    time.run({ untilMs: time.nowMs + 90_000 })
    expect(endpoints.stats.answered2xx).toBe(acknowledged)
    // Past its lease the replacement makes attempt 1 again; then the paused instance resumes and reads the 2xx.
    post(endpoints.fencedBy(replacement), attempt(1))
    time.run({ untilMs: time.nowMs + 1_000 })
    const held = paused.held
    paused.held = null
    for (const call of held) call()
    time.run({ untilMs: time.nowMs + 1_000 })
    expect(endpoints.stats.answered2xx).toBe(acknowledged + 2)
    // The replacement's record of its attempt stands (the paused instance's is refused): its retry is no violation.
    post(endpoints.fencedBy(replacement), attempt(2))
    time.run({ untilMs: time.nowMs + 1_000 })
    expect(endpoints.stats.posts).toBe(4)
    // (The requests carry no valid signature: that law is not this test's.)
    expect(auditor.violations.filter((v) => v.invariant !== "webhook-signature")).toEqual([])
  })
})
