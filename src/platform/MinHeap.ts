/**
 * A binary min-heap ordered by `before` (which must be a strict total order, so that equal
 * inputs always come out in the same order). Due webhook deliveries and the simulator's
 * timers use it; stale entries are the caller's to skip when they surface.
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

  push(item: A): void {
    const items = this.items
    items.push(item)
    let index = items.length - 1
    while (index > 0) {
      const parent = (index - 1) >> 1
      if (!this.before(items[index]!, items[parent]!)) break
      ;[items[index], items[parent]] = [items[parent]!, items[index]!]
      index = parent
    }
  }

  pop(): A | undefined {
    const items = this.items
    const top = items[0]
    const last = items.pop()
    if (items.length > 0 && last !== undefined) {
      items[0] = last
      let index = 0
      const length = items.length
      while (true) {
        const left = 2 * index + 1
        const right = left + 1
        let smallest = index
        if (left < length && this.before(items[left]!, items[smallest]!)) smallest = left
        if (right < length && this.before(items[right]!, items[smallest]!)) smallest = right
        if (smallest === index) break
        ;[items[index], items[smallest]] = [items[smallest]!, items[index]!]
        index = smallest
      }
    }
    return top
  }
}
