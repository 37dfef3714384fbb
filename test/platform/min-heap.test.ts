import { describe, expect, it } from "@effect/vitest"
import fc from "fast-check"
import { MinHeap } from "../../src/platform/MinHeap.ts"

/** The heap against a sorted list, for random interleavings of pushes and pops (seeded). */
describe("MinHeap", () => {
  interface Item {
    readonly at: number
    readonly seq: number
  }
  // A strict total order, as the heap requires: time, then insertion order.
  const before = (a: Item, b: Item) => a.at < b.at || (a.at === b.at && a.seq < b.seq)

  it("pops in order under any interleaving of pushes and pops", () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.oneof(
            fc.record({ push: fc.integer({ min: 0, max: 50 }) }),
            fc.record({ pops: fc.integer({ min: 1, max: 4 }) })
          ),
          { maxLength: 400 }
        ),
        (steps) => {
          const heap = new MinHeap<Item>(before)
          const model: Array<Item> = []
          let seq = 0
          for (const step of steps) {
            if ("push" in step) {
              const item = { at: step.push, seq: seq++ }
              heap.push(item)
              model.push(item)
              model.sort((a, b) => (before(a, b) ? -1 : 1))
            } else {
              for (let i = 0; i < step.pops; i++) {
                expect(heap.peek()).toBe(model[0])
                expect(heap.pop()).toBe(model.shift())
              }
            }
            expect(heap.size).toBe(model.length)
          }
          while (model.length > 0) expect(heap.pop()).toBe(model.shift())
          expect(heap.pop()).toBeUndefined()
          expect(heap.size).toBe(0)
        }
      ),
      { numRuns: 300, seed: 42 }
    )
  })
})
