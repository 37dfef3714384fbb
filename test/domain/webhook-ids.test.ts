import { describe, expect, it } from "vitest"
import { deliveryIdOf, isDeliveryIdOf } from "../../src/domain/Webhook.ts"

describe("isDeliveryIdOf", () => {
  it("says whether an id is deliveryIdOf(eventId), as comparing with it would", () => {
    const events = ["evt_abc123XYZ", "evt_", "evt_a", "evtx_abc", "abc", "", "evt_abc_def", "evt_é😀"]
    const ids = (eventId: string) => [
      deliveryIdOf(eventId),
      `whd_${eventId}`,
      deliveryIdOf(eventId) + "x",
      deliveryIdOf(eventId).slice(0, -1),
      deliveryIdOf(eventId).replace("whd_", "whx_"),
      deliveryIdOf(eventId).replace(/.$/, "Z"),
      "whd_abc123XYZ",
      "whd_",
      ""
    ]
    let agreed = 0
    for (const eventId of events) {
      for (const id of ids(eventId)) {
        expect([id, eventId, isDeliveryIdOf(id, eventId)]).toEqual([id, eventId, id === deliveryIdOf(eventId)])
        agreed++
      }
    }
    expect(agreed).toBe(events.length * 9)
    expect(isDeliveryIdOf("whd_abc123XYZ", "evt_abc123XYZ")).toBe(true)
    expect(isDeliveryIdOf("whd_abc123XYY", "evt_abc123XYZ")).toBe(false)
  })
})
