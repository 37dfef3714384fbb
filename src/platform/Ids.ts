import { Context, Effect, Layer } from "effect"
import { randomBytes } from "node:crypto"
import type { IdKind, MintId } from "../domain/Ids.ts"
import { encodeIdBody, formatId, idRandomChars } from "../domain/Ids.ts"

/**
 * Identifiers and secrets. An id begins with the time it was minted (src/domain/Ids.ts: so new
 * rows land on the rightmost leaves of the indexes keyed by ids) and ends with random characters.
 * Production draws them from the operating system's CSPRNG and the time from the Clock; the
 * simulator and tests use a seeded generator and their virtual clock, so the same seed mints
 * the same ids.
 */
export interface IdsShape {
  readonly mint: MintId
  /** A random URL-safe secret body (for `sk_live_` keys and `whsec_` secrets). */
  readonly secret: (prefix: string) => string
}

export class Ids extends Context.Service<Ids, IdsShape>()("payments/Ids") {}

const secretBytes = 32

/**
 * `bytes` may hand out the same buffer again on its next call: an id is encoded before that.
 * `nowMs` is the time an id carries (epoch milliseconds).
 */
export const makeIds = (bytes: (count: number) => Uint8Array, nowMs: () => number): IdsShape => ({
  mint: (kind: IdKind) => formatId(kind, nowMs(), bytes(idRandomChars)),
  secret: (prefix: string) => prefix + encodeIdBody(bytes(secretBytes))
})

/** Ids from `bytes`, their time from the Clock of the layer's context. */
const layerWith = (bytes: () => (count: number) => Uint8Array) =>
  Layer.effect(
    Ids,
    Effect.clockWith((clock) => Effect.sync(() => makeIds(bytes(), () => clock.currentTimeMillisUnsafe())))
  )

/**
 * Bytes from the operating system's CSPRNG, drawn 4 KiB at a time: a create mints about a dozen
 * ids, and one `randomBytes` call per id cost more than the rest of minting. Every byte is used
 * once; the pool is private to this process.
 */
export const pooledRandomBytes = (poolSize = 4096) => {
  let pool = randomBytes(poolSize)
  let offset = 0
  return (count: number): Uint8Array => {
    if (count > poolSize) return randomBytes(count)
    if (offset + count > poolSize) {
      pool = randomBytes(poolSize)
      offset = 0
    }
    const out = pool.subarray(offset, offset + count)
    offset += count
    return out
  }
}

export const layer = layerWith(() => pooledRandomBytes())

/**
 * sfc32 seeded through splitmix32: a small, fast PRNG in 32-bit integer arithmetic only, so the
 * same seed gives the same sequence on every machine. Returns the generator of uint32 values.
 */
export const sfc32 = (seed: number): () => number => {
  let s = seed >>> 0
  const splitmix = () => {
    s = (s + 0x9e3779b9) >>> 0
    let z = s
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0
    return (z ^ (z >>> 16)) >>> 0
  }
  // The state [a, b, c, d] in a typed array: a store wraps modulo 2^32 as `>>> 0` would, and
  // allocates nothing, where a closure's variable holding a uint32 above 2^30 (no small integer)
  // took a fresh heap number on every draw (54 ns a draw against 6-15 ns, the same sequence).
  const state = new Uint32Array(4)
  state[0] = splitmix()
  state[1] = splitmix()
  state[2] = splitmix()
  state[3] = splitmix()
  return () => {
    const a = state[0]!, b = state[1]!, c = state[2]!, d = state[3]!
    // Below 3 * 2^32: exact in a double.
    const t = (a + b + d) >>> 0
    state[0] = b ^ (b >>> 9)
    state[1] = c + (c << 3)
    state[2] = ((c << 21) | (c >>> 11)) + t
    state[3] = d + 1
    return t
  }
}

/**
 * Deterministic bytes for ids and secrets, one per generator draw. The returned array is
 * overwritten by the next call asking for as many bytes (one buffer per size, not one
 * allocation per id): use it before asking again, as `makeIds` does.
 */
export const seededBytes = (seed: number) => {
  const next = sfc32(seed)
  const buffers = new Map<number, Uint8Array>()
  return (count: number) => {
    let out = buffers.get(count)
    if (out === undefined) buffers.set(count, out = new Uint8Array(count))
    for (let i = 0; i < count; i++) out[i] = next() & 0xff
    return out
  }
}

export const layerSeeded = (seed: number) => layerWith(() => seededBytes(seed))
