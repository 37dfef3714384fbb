import { describe, expect, it } from "@effect/vitest"
import { Clock, Deferred, Effect, Fiber, Layer } from "effect"
import * as Config from "../../src/platform/Config.ts"
import * as Ids from "../../src/platform/Ids.ts"
import { ApiKeys, layer as apiKeysLayer } from "../../src/services/ApiKeys.ts"
import { emptyState, memoryOperations } from "../../src/store/MemoryStore.ts"
import { Store, type StoreShape, StoreUnavailable } from "../../src/store/Store.ts"
import { apiKeyFor, merchantFor, testWorld } from "../store/harness.ts"

// Authentication over the memory store, counting the store calls it makes: a cache miss is one
// call (the key with its merchant, last_used_at written in it when due), a hit none.

const t0 = Date.parse("2026-03-01T00:00:00.000Z")

const setup = () => {
  const memory = memoryOperations(emptyState())
  const calls: Array<string> = []
  let down = false
  // When set, `useApiKey` answers only once `hold.release` is done (its read made already), and
  // says it has read through `hold.read`: a look-up overtaken by something else.
  let hold: { readonly read: Deferred.Deferred<void>; readonly release: Deferred.Deferred<void> } | null = null
  // Every operation counted by name; `down` fails them all as an unreachable database does.
  const store = Object.fromEntries(
    Object.entries(memory).map(([name, operation]) => [
      name,
      (...args: Array<unknown>) =>
        Effect.suspend(() => {
          calls.push(name)
          if (down) return Effect.fail(new StoreUnavailable({ cause: "test: down" }))
          const run = (operation as (...a: Array<unknown>) => Effect.Effect<unknown, StoreUnavailable>)(...args)
          const held = name === "useApiKey" ? hold : null
          if (held === null) return run
          return Effect.flatMap(run, (answer) =>
            Effect.andThen(
              Effect.andThen(Deferred.succeed(held.read, undefined), Deferred.await(held.release)),
              Effect.succeed(answer)
            ))
        })
    ])
  ) as unknown as StoreShape
  const layer = apiKeysLayer.pipe(
    Layer.provide(Layer.mergeAll(
      Layer.succeed(Store, store),
      Ids.layerSeeded(7),
      Config.layerWith(Config.defaultsWith({ apiKeyCacheTtlMs: 5_000 }))
    ))
  )
  return {
    memory,
    calls,
    layer,
    setDown: (value: boolean) => (down = value),
    setHold: (value: typeof hold) => (hold = value)
  }
}

/** A merchant (with its bootstrap key) stored in `memory`. */
const aMerchant = (memory: ReturnType<typeof setup>["memory"]) => {
  const w = testWorld()
  const merchant = merchantFor(w)
  return Effect.as(memory.insertMerchant(merchant, apiKeyFor(w, merchant.id, merchant.createdAt)), merchant)
}

/** `authenticate` on a clock that reads `nowMs`, its answer as a value. */
const authenticateAt = (secret: string, nowMs: number) =>
  Effect.flatMap(ApiKeys, (keys) =>
    keys.authenticate(secret).pipe(
      Effect.catchTag("StoreUnavailable", () => Effect.succeed("unavailable" as const)),
      Effect.provideService(Clock.Clock, clockAt(nowMs))
    ))

/** A clock stopped at `nowMs`. */
const clockAt = (nowMs: number): Clock.Clock => ({
  currentTimeMillisUnsafe: () => nowMs,
  currentTimeNanosUnsafe: () => BigInt(nowMs) * 1_000_000n,
  currentTimeMillis: Effect.succeed(nowMs),
  currentTimeNanos: Effect.succeed(BigInt(nowMs) * 1_000_000n),
  monotonicTimeNanosUnsafe: () => BigInt(nowMs) * 1_000_000n,
  monotonicTimeNanos: Effect.succeed(BigInt(nowMs) * 1_000_000n),
  sleep: () => Effect.never
})

describe("ApiKeys.authenticate", () => {
  it.effect("a miss is one store call that writes last_used_at when due; hits make none; a minute later the look-up writes again", () => {
    const { memory, calls, layer } = setup()
    return Effect.gen(function*() {
      const merchant = yield* aMerchant(memory)
      const issued = yield* (yield* ApiKeys).create(merchant.id, "worker")
      const stored = () => memory.getApiKey(merchant.id, issued.record.id)
      calls.length = 0

      const first = yield* authenticateAt(issued.secret, t0)
      expect(first).toEqual({ key: { ...issued.record, lastUsedAt: t0 }, merchant })
      expect(calls).toEqual(["useApiKey"])
      expect((yield* stored())!.lastUsedAt).toBe(t0)

      // Within the TTL: the cache answers, no store call.
      expect(yield* authenticateAt(issued.secret, t0 + 4_999)).toEqual(first)
      expect(calls).toEqual(["useApiKey"])

      // Past the TTL, within the minute: one call, no write.
      yield* authenticateAt(issued.secret, t0 + 57_000)
      expect(calls).toEqual(["useApiKey", "useApiKey"])
      expect((yield* stored())!.lastUsedAt).toBe(t0)

      // The entry ends when the write falls due, inside its TTL (57 s + 5 s): a minute after the
      // last write, the look-up writes it.
      yield* authenticateAt(issued.secret, t0 + 59_999)
      expect(calls).toHaveLength(2)
      const later = yield* authenticateAt(issued.secret, t0 + 60_000)
      expect(calls).toHaveLength(3)
      expect(later).toMatchObject({ key: { lastUsedAt: t0 + 60_000 } })
      expect((yield* stored())!.lastUsedAt).toBe(t0 + 60_000)
    }).pipe(Effect.provide(layer))
  })

  it.effect("unknown and revoked keys are answered null and never cached; a store failure is answered unavailable", () => {
    const { memory, calls, layer, setDown } = setup()
    return Effect.gen(function*() {
      const merchant = yield* aMerchant(memory)
      const keys = yield* ApiKeys
      const issued = yield* keys.create(merchant.id, "worker")
      yield* keys.rotate(merchant.id, issued.record.id)
      calls.length = 0

      for (const at of [t0, t0 + 1]) {
        expect(yield* authenticateAt(issued.secret, at)).toBeNull()
        expect(yield* authenticateAt("sk_live_unknownunknownunknownunknown12", at)).toBeNull()
      }
      // Each asked the store again: nothing cached.
      expect(calls).toEqual(["useApiKey", "useApiKey", "useApiKey", "useApiKey"])
      // The revoked key was never written.
      expect((yield* memory.getApiKey(merchant.id, issued.record.id))!.lastUsedAt).toBeNull()

      const fresh = yield* keys.create(merchant.id, "next")
      setDown(true)
      expect(yield* authenticateAt(fresh.secret, t0)).toBe("unavailable")
      setDown(false)
      // The failure cached nothing: the next call looks the key up and writes last_used_at.
      expect(yield* authenticateAt(fresh.secret, t0 + 1)).toMatchObject({
        key: { id: fresh.record.id, lastUsedAt: t0 + 1 }
      })
    }).pipe(Effect.provide(layer))
  })

  it.effect("a look-up answered after a rotation in this process cleared the cache does not put the old key back", () => {
    const { memory, calls, layer, setHold } = setup()
    return Effect.gen(function*() {
      const merchant = yield* aMerchant(memory)
      const keys = yield* ApiKeys
      const issued = yield* keys.create(merchant.id, "worker")
      const read = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      setHold({ read, release })
      // The look-up reads the key while it is active, then waits; the rotation commits meanwhile.
      const lookUp = yield* Effect.forkChild(authenticateAt(issued.secret, t0))
      yield* Deferred.await(read)
      setHold(null)
      yield* keys.rotate(merchant.id, issued.record.id)
      yield* Deferred.succeed(release, undefined)
      // It began before the rotation, so it may still answer the key it read...
      expect(yield* Fiber.join(lookUp)).toMatchObject({ key: { id: issued.record.id } })
      // ...but it cached nothing: the next request asks the store and is refused.
      calls.length = 0
      expect(yield* authenticateAt(issued.secret, t0 + 1)).toBeNull()
      expect(calls).toEqual(["useApiKey"])
    }).pipe(Effect.provide(layer))
  })
})
