import { sfc32 } from "../../src/platform/Ids.ts"

/**
 * The simulator's seeded randomness: sfc32 seeded through splitmix32 (the generator behind
 * `src/platform/Ids.ts seededBytes`), in 32-bit integer arithmetic only, so it gives the same
 * sequence on every machine. Each concern (workload, acquirer, crashes, webhooks) draws from
 * its own stream, derived from the run seed and a label, so adding a draw in one concern does
 * not reshuffle the others.
 */
export class Prng {
  readonly next32: () => number

  constructor(seed: number) {
    this.next32 = sfc32(seed)
  }

  /** A stream for one concern: the seed mixed with a hash of the label. */
  static derive(seed: number, label: string): Prng {
    return new Prng((seed ^ hash32(label)) >>> 0)
  }

  /** Uniform in [0, 1). */
  float(): number {
    return this.next32() / 4_294_967_296
  }

  /** Uniform integer in [low, high] (inclusive). */
  int(low: number, high: number): number {
    return low + Math.floor(this.float() * (high - low + 1))
  }

  chance(probability: number): boolean {
    return probability > 0 && this.float() < probability
  }

  pick<A>(items: ReadonlyArray<A>): A {
    return items[Math.floor(this.float() * items.length)]!
  }

  /** Picks a key with probability proportional to its weight. */
  weighted<K extends string>(weights: Readonly<Record<K, number>>): K {
    const entries = Object.entries(weights) as Array<[K, number]>
    let total = 0
    for (const [, weight] of entries) total += weight
    let roll = this.float() * total
    for (const [key, weight] of entries) {
      roll -= weight
      if (roll < 0) return key
    }
    return entries[entries.length - 1]![0]
  }

  /** Exponentially distributed delay with the given mean (Poisson arrivals). */
  exponential(meanMs: number): number {
    return Math.max(1, Math.round(-Math.log(1 - this.float()) * meanMs))
  }

  /** A byte source for `Ids.makeIds`. */
  bytes(): (count: number) => Uint8Array {
    return (count) => {
      const out = new Uint8Array(count)
      for (let i = 0; i < count; i++) out[i] = this.next32() & 0xff
      return out
    }
  }
}

/** FNV-1a over UTF-16 code units: a stable 32-bit hash for labels. */
export const hash32 = (text: string): number => {
  let h = 0x811c9dc5
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i)
    h = Math.imul(h, 0x01000193) >>> 0
  }
  return h >>> 0
}
