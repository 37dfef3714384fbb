/**
 * A binary min-heap ordered by `before` (which must be a strict total order, so that equal
 * inputs always come out in the same order): the one heap of the code base. The simulator's
 * wake-ups (sim/engine/VirtualTime.ts), due webhook deliveries and the memory store's ordered queues
 * (`OrderedQueue`, a FIFO in front of it) use it; stale entries are the caller's to skip when
 * they surface.
 */
export class MinHeap<A> {
  private readonly items: Array<A> = []

  constructor(private readonly before: (a: A, b: A) => boolean) {}

  get size(): number {
    return this.items.length
  }

  peek(): A | undefined {
    return this.items[0]
  }

  // Both sifts move a hole instead of swapping pairs: one write a level, no temporary arrays.
  push(item: A): void {
    this.items.push(item)
    this.siftUp(this.items.length - 1, item)
  }

  /** Moves the hole at `index` up while `item` goes before its parent, then puts `item` in it. */
  private siftUp(index: number, item: A): void {
    const items = this.items
    const before = this.before
    while (index > 0) {
      const parent = (index - 1) >> 1
      const above = items[parent]!
      if (!before(item, above)) break
      items[index] = above
      index = parent
    }
    items[index] = item
  }

  /**
   * Bottom-up (Floyd): the hole left at the top moves down to a leaf along the smaller children,
   * one comparison a level, then the last item sifts up from there. The last item came from the
   * bottom, so it rarely rises far: about half the comparisons of sifting it down, which compares
   * it with the smaller child at every level as well.
   */
  pop(): A | undefined {
    const items = this.items
    const top = items[0]
    const last = items.pop()
    const length = items.length
    if (length > 0 && last !== undefined) {
      const before = this.before
      let index = 0
      while (true) {
        const left = 2 * index + 1
        if (left >= length) break
        const right = left + 1
        const child = right < length && before(items[right]!, items[left]!) ? right : left
        items[index] = items[child]!
        index = child
      }
      this.siftUp(index, last)
    }
    return top
  }
}
