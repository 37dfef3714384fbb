/**
 * The seam between the harness's driver (load models, the HTTP client, histograms, reports:
 * `bench/harness/`) and what it drives (the simulator's merchants, webhook endpoints and laws,
 * run over real HTTP). The driver knows nothing of payments; a scenario knows nothing of
 * arrival rates or percentiles.
 */

export interface WireRequest {
  readonly method: string
  /** Path and query, e.g. `/api/v1/transactions/pay_123/refund`. */
  readonly path: string
  readonly headers: Readonly<Record<string, string>>
  readonly body: string | null
}

export interface WireResponse {
  readonly status: number
  /** Header names in lower case. */
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
}

/**
 * The driver's HTTP client to the target: a keep-alive pool. Every request is recorded (latency,
 * status, route) by the driver. `intendedStartMs` (performance.now() clock) is when the load model
 * meant the request to start: its latency is measured from then, so a stalled service cannot hide
 * its tail behind requests that were never sent (coordinated omission); null measures from the
 * moment it is actually sent (a request that follows another one of the same script).
 * Resolves to null when the connection dropped or the client's timeout passed: the outcome is
 * unknown to the client, as for a real merchant.
 */
export interface Transport {
  send(request: WireRequest, intendedStartMs: number | null): Promise<WireResponse | null>
}

/** Where and how the scenario runs, as the command line chose. */
export interface SetupContext {
  /** Base URL of the service, e.g. `http://127.0.0.1:3000`. */
  readonly targetUrl: string
  /**
   * Merchants' API keys: every key of this shard's own keys file (`--keys`, bench/harness/KeyFile.ts:
   * no other shard drives them); null when the harness started the service itself, and the
   * scenario creates its merchants with `createMerchant`.
   */
  readonly apiKeys: ReadonlyArray<string> | null
  /** Present when the harness started the service on its own database (embedded mode). */
  readonly embedded: EmbeddedTarget | null
  readonly merchants: number
  readonly seed: number
  /** Host the scenario's webhook endpoints listen on and, without `webhookUrl`, register (`--webhook-host`). */
  readonly webhookHost: string
  /** Port they listen on (`--webhook-port`); 0 or absent: any free one. */
  readonly webhookPort?: number
  /**
   * Base URL they are registered under, `<webhookUrl>/m/<j>` (`--webhook-url`: a receiver the
   * target reaches through NAT, a proxy or another host); null or absent: `http://<webhookHost>:<port>`.
   */
  readonly webhookUrl?: string | null
  /** `--shard I/N` (0 ≤ I < N): this process's share; scenarios keep their merchants and scripts apart by it. */
  readonly shard: { readonly index: number; readonly count: number }
  readonly transport: Transport
  readonly log: (line: string) => void
  /** The instances the transport spreads requests over, in turn (absent: 1). Per-instance limits (the rate limit) need it. */
  readonly instances?: number
  /** The faults the harness injects into the service (`--nemesis`) as they happen; absent without one. */
  readonly faults?: FaultLog
}

/** A fault the harness injected: a service instance killed or paused, or the database paused. */
export interface FaultWindow {
  readonly kind: string
  /** The instance (from 0); null for the database, which every instance shares. */
  readonly instance: number | null
  /** Epoch ms. */
  readonly startedAtMs: number
  /** Epoch ms; null while it lasts. */
  readonly endedAtMs: number | null
}

/**
 * The faults so far, for laws that a fault may excuse: what a process that died or stalled had
 * under way may be done again (a webhook attempt it had sent), and nothing else.
 */
export interface FaultLog {
  /** When the latest fault began (epoch ms); -Infinity before the first. */
  lastStartedAtMs(): number
  /** Every fault so far, oldest first. */
  windows(): ReadonlyArray<FaultWindow>
}

/** What only a harness that started the service itself can do (as the card network would). */
export interface EmbeddedTarget {
  /** PostgreSQL URL of the service's database. */
  readonly databaseUrl: string
  /** The service's `WEBHOOK_RETRY_SCHEDULE` as the harness set it: retry offsets after a failed attempt. */
  readonly webhookRetryScheduleMs: ReadonlyArray<number>
  /** The service's `WEBHOOK_TIMEOUT`: an endpoint slower than this fails the attempt. */
  readonly webhookTimeoutMs: number
  /** The service's `RATE_LIMIT_PER_SECOND` (per key and per instance; bursts of twice that). */
  readonly rateLimitPerSecond: number
  /** The service's `SETTLEMENT_CUTOFF`, minutes after midnight UTC: set far from the run, so none passes during it. */
  readonly settlementCutoffMinutes: number
  /** Creates a merchant as `payments merchant create` does; returns its id and API key. */
  createMerchant(
    name: string,
    webhookUrl: string | null
  ): Promise<{ readonly merchantId: string; readonly apiKey: string }>
  /** Runs the settlement now (`payments settle`, cut-off now) on the service's database; the payments settled. */
  settle(): Promise<number>
}

export interface Violation {
  readonly paymentId: string | null
  readonly message: string
  /** The requests that led there, as `METHOD path -> status`, oldest first. */
  readonly requests: ReadonlyArray<string>
}

export interface LawResult {
  readonly law: string
  /** One sentence: what the law promises (docs/simulation.md's list). */
  readonly description: string
  readonly checked: number
  readonly violations: ReadonlyArray<Violation>
}

/** What the harness runs. */
export interface Scenario {
  readonly name: string
  /** The requests a script sends on average: the open model starts scripts at `--rate` divided by it. */
  readonly requestsPerScript: number
  setup(context: SetupContext): Promise<void>
  /**
   * Runs script number `index` (a merchant's payment story: create, retries, capture, refunds...)
   * whose first request the load model meant to start at `intendedStartMs`. Resolves when the
   * script ends; never rejects for an answer the service gives (those are the laws' business).
   */
  runScript(index: number, intendedStartMs: number): Promise<void>
  /**
   * After the load stops: waits until nothing is left in flight (payments final, webhook
   * deliveries ended or scheduled), bounded by `deadlineMs` of real time.
   */
  drain(deadlineMs: number): Promise<void>
  /** Every law, read through the public API (and what the endpoints received). */
  checkLaws(): Promise<ReadonlyArray<LawResult>>
  /** Counts of the scenario's own worth reporting beside the laws (the merchants': webhook redeliveries), read after `checkLaws`. */
  figures?(): Readonly<Record<string, number>>
  /** Closes the endpoints' servers and anything else the scenario opened. */
  close(): Promise<void>
}
