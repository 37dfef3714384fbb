/**
 * The simulator's seeded randomness: sfc32 seeded through splitmix32 (the generator behind
 * `src/platform/Ids.ts seededBytes`), in 32-bit integer arithmetic only, so it gives the same
 * sequence on every machine. Each concern (workload, acquirer, crashes, webhooks) draws from
 * its own stream, derived from the run seed and a label, so adding a draw in one concern does
 * not reshuffle the others.
 */
export class Prng {
  private a: number
  private b: number
  private c: number
  private d: number

  constructor(seed: number) {
    let s = seed >>> 0
    const splitmix = () => {
      s = (s + 0x9e3779b9) >>> 0
      let z = s
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0
      return (z ^ (z >>> 16)) >>> 0
    }
    this.a = splitmix()
    this.b = splitmix()
    this.c = splitmix()
    this.d = splitmix()
  }

  /** A stream for one concern: the seed mixed with a hash of the label. */
  static derive(seed: number, label: string): Prng {
    return new Prng((seed ^ hash32(label)) >>> 0)
  }

  next32(): number {
    const t = (((this.a + this.b) >>> 0) + this.d) >>> 0
    this.d = (this.d + 1) >>> 0
    this.a = this.b ^ (this.b >>> 9)
    this.b = (this.c + (this.c << 3)) >>> 0
    this.c = ((this.c << 21) | (this.c >>> 11)) >>> 0
    this.c = (this.c + t) >>> 0
    return t
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
