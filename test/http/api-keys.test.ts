import { createHash } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { client, errorOf, startApp, type TestApp } from "../support/app.ts"

// CONTRACT section 4: API keys through the public API.

let app: TestApp
beforeAll(async () => {
  app = await startApp({ label: "apikeys" })
})
afterAll(async () => {
  await app?.close()
})

const newMerchant = async () => {
  const merchant = await app.createMerchant()
  return { ...merchant, api: client(app.baseUrl, merchant.key) }
}

const keyPattern = /^sk_live_[A-Za-z0-9]{16,128}$/

describe("create", () => {
  it("answers 201 with the full key once; the key works at once", async () => {
    const { api, key } = await newMerchant()
    const reply = await api.post("/api/v1/api_keys", { name: "backend" })
    expect(reply.status).toBe(201)
    expect(Object.keys(reply.body)).toEqual(["api_key"])
    const created = reply.body.api_key
    expect(created).toMatchObject({ name: "backend", status: "active" })
    expect(created.id).toMatch(/^key_/)
    expect(created.key).toMatch(keyPattern)
    expect(created.key).not.toBe(key)
    expect(created.prefix).toBe(created.key.slice(0, 12))
    expect(created.created_at).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/)

    const viaNewKey = await client(app.baseUrl, created.key).get("/api/v1/merchants/me")
    expect(viaNewKey.status).toBe(200)
    expect(viaNewKey.body.merchant.id).toBe((await api.get("/api/v1/merchants/me")).body.merchant.id)

    // Only the hash is kept.
    const rows = await app.query("SELECT * FROM api_keys WHERE id = $1", [created.id])
    expect(rows[0]!.key_hash).toBe(createHash("sha256").update(created.key).digest("hex"))
    expect(JSON.stringify(rows)).not.toContain(created.key)
  })

  it.each([
    [{}, "name"],
    [{ name: "" }, "name"],
    [{ name: "n".repeat(101) }, "name"],
    [{ name: 7 }, "name"],
    [{ name: "x", scope: "all" }, "scope"]
  ])("refuses %j with 422 naming %s and creates nothing", async (body, param) => {
    const { api } = await newMerchant()
    const reply = await api.post("/api/v1/api_keys", body)
    expect(reply.status).toBe(422)
    expect(errorOf(reply)).toMatchObject({ code: "validation_failed", param })
    expect((await api.get("/api/v1/api_keys")).body.meta.total_count).toBe(1)
  })
})

describe("list", () => {
  it("lists the merchant's keys newest first, never with the secret", async () => {
    const { api, key } = await newMerchant()
    const created = []
    for (const name of ["one", "two", "three"]) {
      created.push((await api.post("/api/v1/api_keys", { name })).body.api_key)
    }
    const reply = await api.get("/api/v1/api_keys")
    expect(reply.status).toBe(200)
    expect(Object.keys(reply.body).sort()).toEqual(["api_keys", "meta"])
    expect(reply.body.meta).toEqual({ page: 1, per_page: 20, total_count: 4, total_pages: 1, has_more: false })
    const listed = reply.body.api_keys as Array<Record<string, unknown>>
    expect(listed.map((k) => k.name)).toEqual(["three", "two", "one", "Default key"])
    for (const k of listed) {
      expect(Object.keys(k).sort()).toEqual(
        ["created_at", "id", "last_four", "last_used_at", "name", "prefix", "revoked_at", "status"]
      )
      expect(k.status).toBe("active")
      expect(k.revoked_at).toBeNull()
    }
    for (const secret of [key, ...created.map((c) => c.key as string)]) expect(reply.text).not.toContain(secret)
    expect(listed[0]).toMatchObject({
      id: created[2].id,
      prefix: created[2].prefix,
      last_four: created[2].key.slice(-4)
    })
    // The key in use has been seen.
    expect(listed.at(-1)!.last_used_at).toMatch(/Z$/)

    const paged = await api.get("/api/v1/api_keys?per_page=3&page=2")
    expect(paged.body.meta).toEqual({ page: 2, per_page: 3, total_count: 4, total_pages: 2, has_more: false })
    expect(paged.body.api_keys.map((k: any) => k.name)).toEqual(["Default key"])
  })

  it("shows only the merchant's own keys", async () => {
    const a = await newMerchant()
    const b = await newMerchant()
    await a.api.post("/api/v1/api_keys", { name: "a-only" })
    const listed = (await b.api.get("/api/v1/api_keys")).body.api_keys
    expect(listed.map((k: any) => k.name)).toEqual(["Default key"])
  })
})

describe("rotate", () => {
  it("answers 201 with a new key and revokes the old one at once", async () => {
    const { api } = await newMerchant()
    const old = (await api.post("/api/v1/api_keys", { name: "worker" })).body.api_key
    const oldClient = client(app.baseUrl, old.key)
    expect((await oldClient.get("/api/v1/merchants/me")).status).toBe(200)

    const reply = await api.post(`/api/v1/api_keys/${old.id}/rotate`)
    expect(reply.status).toBe(201)
    const fresh = reply.body.api_key
    expect(fresh).toMatchObject({ name: "worker", status: "active" })
    expect(fresh.id).not.toBe(old.id)
    expect(fresh.key).toMatch(keyPattern)
    expect(fresh.key).not.toBe(old.key)

    const refused = await oldClient.get("/api/v1/merchants/me")
    expect(refused.status).toBe(401)
    expect(errorOf(refused)).toMatchObject({ type: "authentication_error", code: "invalid_api_key" })
    expect((await client(app.baseUrl, fresh.key).get("/api/v1/merchants/me")).status).toBe(200)

    const listed = (await api.get("/api/v1/api_keys")).body.api_keys as Array<any>
    expect(listed.find((k) => k.id === old.id)).toMatchObject({
      status: "revoked",
      revoked_at: expect.stringMatching(/Z$/)
    })
    expect(listed.find((k) => k.id === fresh.id)).toMatchObject({ status: "active", revoked_at: null })
    expect((await api.get("/api/v1/api_keys")).text).not.toContain(fresh.key)

    const again = await api.post(`/api/v1/api_keys/${old.id}/rotate`)
    expect(again.status).toBe(409)
    expect(errorOf(again).code).toBe("invalid_state")
    expect(errorOf(again).message).toContain("revoked")
    expect((await api.get("/api/v1/api_keys")).body.meta.total_count).toBe(3)
  })

  it("a merchant may rotate the key it is calling with; that key stops working", async () => {
    const { api, key } = await newMerchant()
    const own = (await api.get("/api/v1/api_keys")).body.api_keys[0]
    const reply = await api.post(`/api/v1/api_keys/${own.id}/rotate`)
    expect(reply.status).toBe(201)
    expect((await client(app.baseUrl, key).get("/api/v1/api_keys")).status).toBe(401)
    expect((await client(app.baseUrl, reply.body.api_key.key).get("/api/v1/api_keys")).status).toBe(200)
  })

  it("another merchant's key, or an unknown key, is 404 and stays active", async () => {
    const a = await newMerchant()
    const b = await newMerchant()
    const target = (await a.api.get("/api/v1/api_keys")).body.api_keys[0]
    const reply = await b.api.post(`/api/v1/api_keys/${target.id}/rotate`)
    expect(reply.status).toBe(404)
    expect(errorOf(reply).code).toBe("not_found")
    expect((await b.api.post("/api/v1/api_keys/key_unknown/rotate")).status).toBe(404)
    expect((await a.api.get("/api/v1/merchants/me")).status).toBe(200)
    expect((await a.api.get("/api/v1/api_keys")).body.api_keys[0].status).toBe("active")
  })

  it("two concurrent rotations of one key: one 201, one 409, one new key", async () => {
    const { api } = await newMerchant()
    const target = (await api.post("/api/v1/api_keys", { name: "contended" })).body.api_key
    const replies = await Promise.all([
      api.post(`/api/v1/api_keys/${target.id}/rotate`),
      api.post(`/api/v1/api_keys/${target.id}/rotate`)
    ])
    expect(replies.map((r) => r.status).sort()).toEqual([201, 409])
    const active = (await api.get("/api/v1/api_keys")).body.api_keys.filter((k: any) =>
      k.name === "contended" && k.status === "active"
    )
    expect(active).toHaveLength(1)
  })
})
