/**
 * One numbering of shards for every command that splits work across processes (`sim:sweep
 * --shard`, `harness --shard`, `harness keys --shards`): `I/N` with 0 ≤ I < N, as a Kubernetes
 * Indexed Job numbers its pods (`JOB_COMPLETION_INDEX`) and a CI matrix its entries, and the item
 * at position p of a list belongs to shard p mod N. Read in one place, so the simulator's sweep and
 * the load harness cannot drift apart again.
 */

export interface Shard {
  /** 0 to count - 1. */
  readonly index: number
  readonly count: number
}

/** At most this many shards (a bound, as on every input). */
export const maxShards = 10_000

/** `I/N` (0 ≤ I < N ≤ 10,000), or an Error whose message names `flag` and the rule. */
export const parseShard = (text: string, flag = "--shard"): Shard => {
  const match = /^(\d{1,5})\/(\d{1,5})$/.exec(text.trim())
  const index = Number(match?.[1])
  const count = Number(match?.[2])
  if (match === null || count < 1 || count > maxShards || index >= count) {
    throw new Error(
      `${flag} must be I/N with 0 <= I < N <= ${maxShards} (the shards of 4 are 0/4, 1/4, 2/4 and 3/4), not '${text}'`
    )
  }
  return { index, count }
}

export const shardText = (shard: Shard) => `${shard.index}/${shard.count}`

/** The items of shard `index` of `count`: those at positions index, index + count, ... (deterministic, balanced). */
export const shardOf = <A>(items: ReadonlyArray<A>, shard: Shard | null): ReadonlyArray<A> =>
  shard === null ? items : items.filter((_, position) => position % shard.count === shard.index)
