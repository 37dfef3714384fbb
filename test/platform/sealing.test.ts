import { describe, expect, it } from "vitest"
import { isSealed, makeSecretColumn, parseKey } from "../../src/platform/Sealing.ts"

const key = parseKey("ab".repeat(32))!
const otherKey = parseKey("cd".repeat(32))!

describe("webhook secrets as PostgreSQL keeps them (SecretColumn)", () => {
  it("seals under the key, bound to the merchant: another key or another merchant's row opens nothing", () => {
    const column = makeSecretColumn(key)
    const stored = column.toStored("mer_a", "whsec_a")
    expect(isSealed(stored)).toBe(true)
    expect(stored).not.toContain("whsec_")
    expect(column.fromStored("mer_a", stored)).toBe("whsec_a")
    // Answered from the cache, and still refused for another merchant.
    expect(column.fromStored("mer_b", stored)).toBeNull()
    // A fresh process (no cache) opens it under the same key only.
    expect(makeSecretColumn(key).fromStored("mer_a", stored)).toBe("whsec_a")
    expect(makeSecretColumn(key).fromStored("mer_b", stored)).toBeNull()
    expect(makeSecretColumn(otherKey).fromStored("mer_a", stored)).toBeNull()
    expect(makeSecretColumn(null).fromStored("mer_a", stored)).toBeNull()
  })

  it("reads plaintext as it is (rows from before sealing); without a key writes plaintext", () => {
    expect(makeSecretColumn(key).fromStored("mer_a", "whsec_old")).toBe("whsec_old")
    const keyless = makeSecretColumn(null)
    expect(keyless.sealing).toBe(false)
    expect(keyless.toStored("mer_a", "whsec_a")).toBe("whsec_a")
  })

  it("keeps at most `capacity` opened secrets, the oldest leaving first", () => {
    const writer = makeSecretColumn(key)
    const stored = Array.from({ length: 5 }, (_, i) => writer.toStored(`mer_${i}`, `whsec_${i}`))
    const reader = makeSecretColumn(key, 3)
    stored.forEach((s, i) => expect(reader.fromStored(`mer_${i}`, s)).toBe(`whsec_${i}`))
    expect(reader.cachedCount()).toBe(3)
    // Evicted entries open again from the sealed text (a decryption, the same answer).
    stored.forEach((s, i) => expect(reader.fromStored(`mer_${i}`, s)).toBe(`whsec_${i}`))
    expect(reader.cachedCount()).toBe(3)
  })
})
