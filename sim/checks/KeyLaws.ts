import type { Auditor } from "./Auditor.ts"

/**
 * Law `revoked-key-refused`, written from CONTRACT section 4 ("rotation revokes the old key at
 * once") and docs/operations.md (`API_KEY_CACHE_TTL`: "how long a process trusts an active API key
 * it looked up; a revocation by another process is honoured within it"): once a rotation has
 * committed, a request that carries the old key and is sent after that commit is refused with 401
 * by the process that made the rotation, and by every process once the cache's TTL has passed.
 *
 * Its record is what the simulator saw, never what the service says: the rotation's commit as the
 * store made it (whatever its caller was told: a lost answer, a crash), the instance that made it,
 * and each answer with the key that was sent, when, and the instance that served it. The key is
 * known by the secret the merchant sent (the workload holds each secret with its id).
 */
export interface KeyLawStats {
  /** Requests sent with a key after its revocation committed, that had to be refused (the law's reach). */
  mustRefuse: number
}

export const keyLaw = (auditor: Auditor, options: { readonly cacheTtlMs: number }) => {
  /** Revoked keys by their secret: when the revocation committed, and by which instance (an object compared by identity). */
  const revoked = new Map<string, { readonly keyId: string; readonly atMs: number; readonly by: object | null }>()
  const stats: KeyLawStats = { mustRefuse: 0 }
  return {
    stats,
    /** The rotation of `keyId` (sent with `secret`) committed at `atMs`, made by instance `by`. */
    revoked: (secret: string, keyId: string, atMs: number, by: object | null) => {
      if (!revoked.has(secret)) revoked.set(secret, { keyId, atMs, by })
    },
    /**
     * A request sent with `secret` at `sentAtMs`, served by instance `by`, answered `status` (null:
     * no answer reached the client). A 503 may come before authentication (the key's look-up
     * failed): it proves nothing either way.
     */
    answered: (secret: string | undefined, sentAtMs: number, by: object, status: number | null, what: () => string) => {
      if (secret === undefined || revoked.size === 0) return
      const revocation = revoked.get(secret)
      // Sent in the very instant of the commit: its authentication may have come first.
      if (revocation === undefined || !(sentAtMs > revocation.atMs)) return
      const mustRefuse = by === revocation.by || sentAtMs >= revocation.atMs + options.cacheTtlMs
      if (!mustRefuse) return
      stats.mustRefuse++
      if (status === null || status === 401 || status === 503) return
      auditor.fail(
        "revoked-key-refused",
        `${what()} with key ${revocation.keyId}, sent ${sentAtMs - revocation.atMs} ms after its rotation committed ` +
          `(${
            by === revocation.by ? "on the instance that made it" : `past the ${options.cacheTtlMs} ms cache TTL`
          }), answered ${status} instead of 401`
      )
    }
  }
}

export type KeyLaw = ReturnType<typeof keyLaw>
