import { createHmac } from "node:crypto"
import { describe, expect, it } from "vitest"
import { hmacHex, signatureHeader, verifyWebhookSignature } from "../../src/domain/Webhook.ts"

// The verifier merchants use (exported by src/client.ts) against the signer the dispatcher uses.

const secret = "whsec_current_0123456789"
const previous = "whsec_previous_0123456789"
const body = `{"id":"evt_1","type":"payment.captured"}`
const t = 1_795_000_000

describe("verifyWebhookSignature", () => {
  it("accepts what the dispatcher signs, with the current or (during a rotation) the previous secret", () => {
    expect(verifyWebhookSignature(secret, signatureHeader([secret], t, body), body, t)).toBe(true)
    const rotating = signatureHeader([secret, previous], t, body)
    expect(verifyWebhookSignature(secret, rotating, body, t)).toBe(true)
    expect(verifyWebhookSignature(previous, rotating, body, t)).toBe(true)
  })

  it("refuses another secret, another body, another timestamp and a malformed header", () => {
    const header = signatureHeader([secret], t, body)
    expect(verifyWebhookSignature("whsec_other", header, body, t)).toBe(false)
    expect(verifyWebhookSignature(secret, header, body.replace("captured", "refunded"), t)).toBe(false)
    expect(verifyWebhookSignature(secret, header.replace(`t=${t}`, `t=${t + 1}`), body, t)).toBe(false)
    for (const bad of [undefined, null, "", "v1=abc", `t=${t}`, `t=x,v1=${"0".repeat(64)}`, "t=1,v1=zz"]) {
      expect(verifyWebhookSignature(secret, bad, body, t)).toBe(false)
    }
  })

  it("refuses a delivery older or newer than the tolerance (a replay), accepts one inside it", () => {
    const header = signatureHeader([secret], t, body)
    expect(verifyWebhookSignature(secret, header, body, t + 300)).toBe(true)
    expect(verifyWebhookSignature(secret, header, body, t + 301)).toBe(false)
    expect(verifyWebhookSignature(secret, header, body, t - 301)).toBe(false)
    expect(verifyWebhookSignature(secret, header, body, t + 3_000, 3_600)).toBe(true)
  })

  it("signs exactly as createHmac does: short and long secrets, ASCII or not, any body", () => {
    const secrets = [
      secret,
      "",
      "6",
      "\u0000\u007f",
      "x".repeat(64),
      "x".repeat(65),
      "whsec_é",
      "whsec_😀",
      "k".repeat(200)
    ]
    const bodies = [
      "",
      body,
      "é😀\u0000",
      "lone \ud800 and \udc00 surrogates",
      `{"id":"evt_1","note":"${"ü".repeat(300)}"}`,
      "a".repeat(5000)
    ]
    for (const s of secrets) {
      for (const b of bodies) {
        for (const ts of [0, t, 9_999_999_999, -1, 1.5]) {
          expect(hmacHex(s, ts, b)).toBe(createHmac("sha256", s).update(`${ts}.${b}`).digest("hex"))
        }
      }
    }
  })

  it("signs a header with several secrets (short, long, non-ASCII mixed), each exactly as createHmac does", () => {
    const secrets = [secret, "k".repeat(200), "whsec_é", previous]
    for (const b of ["", body, "é😀".repeat(2000)]) {
      const expected = secrets.map((s) => `,v1=${createHmac("sha256", s).update(`${t}.${b}`).digest("hex")}`).join("")
      expect(signatureHeader(secrets, t, b)).toBe(`t=${t}${expected}`)
    }
  })
})
