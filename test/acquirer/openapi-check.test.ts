import { describe, expect, it } from "vitest"
import { checkRequest, checkResponse, stripeDocument } from "./openapiCheck.ts"

// The checker the connector's tests lean on finds what it is meant to find.

describe("the Stripe OpenAPI checker", () => {
  it("reads the trimmed document of the pinned version", () => {
    expect(stripeDocument.info.version).toBe("2023-08-16")
  })

  it("passes a well-formed request and flags an unknown parameter, a wrong type and an unknown operation", () => {
    const url = new URL("https://api.stripe.test/v1/payment_intents")
    expect(
      checkRequest(
        "POST",
        url,
        "amount=100&currency=eur&confirm=true&capture_method=manual&metadata[payment_id]=pay_1&expand[]=latest_charge"
      )
    ).toEqual([])
    expect(checkRequest("POST", url, "amount=ten&currency=eur")).toEqual([
      expect.stringContaining("expected an integer")
    ])
    expect(checkRequest("POST", url, "amount=1&currency=eur&capture_method=later")).toEqual([
      expect.stringContaining("not one of")
    ])
    expect(checkRequest("POST", url, "amount=1&currency=eur&colour=red")).toEqual([
      expect.stringContaining("colour: not in the schema")
    ])
    expect(checkRequest("GET", new URL("https://api.stripe.test/v1/payment_intents?created[gte]=1&colour=red"), ""))
      .toEqual([
        expect.stringContaining("unknown query parameter colour")
      ])
    expect(checkRequest("DELETE", url, "")).toEqual([expect.stringContaining("no such operation")])
  })

  it("flags an answer with a missing required field or a field Stripe does not have", () => {
    const url = new URL("https://api.stripe.test/v1/payment_intents/pi_1")
    const intent = {
      id: "pi_1",
      object: "payment_intent",
      amount: 1,
      capture_method: "manual",
      confirmation_method: "automatic",
      created: 1,
      currency: "eur",
      livemode: false,
      payment_method_types: ["card"],
      status: "requires_capture"
    }
    expect(checkResponse("GET", url, 200, intent)).toEqual([])
    const { status: _status, ...withoutStatus } = intent
    expect(checkResponse("GET", url, 200, withoutStatus)).toEqual([
      expect.stringContaining("status: required, missing")
    ])
    expect(checkResponse("GET", url, 200, { ...intent, colour: "red" })).toEqual([
      expect.stringContaining("colour: not in the schema")
    ])
    expect(
      checkResponse("GET", url, 404, { error: { type: "invalid_request_error", message: "No such payment_intent" } })
    ).toEqual([])
    expect(checkResponse("GET", url, 404, { message: "No such payment_intent" })).not.toEqual([])
  })
})
