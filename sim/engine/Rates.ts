/**
 * The rates a run draws from: its faults and its workload mix (fractions and per-hour counts).
 * Their defaults, names and parsing are in ./Options.ts; a planted bug names the rates that
 * catch it (sim/checks/PlantedBugs.ts).
 */
export interface FaultRates {
  /** Ordinary cards the network declines anyway (`do_not_honor`). */
  readonly acquirerDecline: number
  /** Authorizations answered slowly: past the 5 s request deadline, within the 10 s flow timeout. */
  readonly acquirerSlow: number
  /** Authorizations never answered (the flow fails with `network_timeout`). */
  readonly acquirerTimeout: number
  /** Authorizations whose first tries fail in transport (retried by the flow). */
  readonly acquirerTransient: number
  /**
   * Authorizations the network answers at once, as the sandbox does (`Acquirer.answerNow`): the
   * create decides its whole flow in its request and writes the payment once
   * (`Store.readForCreate`, `Store.insertCreated`). Drawn only when above 0. Absent: none.
   */
  readonly acquirerInstant?: number
  /** Crash-and-restart events per virtual hour. */
  readonly crashesPerHour: number
  /** Webhook endpoint behaviour, as fractions of attempts. */
  readonly webhook4xx: number
  readonly webhook5xx: number
  readonly webhookSlow: number
  /** Answered 2xx after 10–29 s: slow but inside the timeout, so an endpoint's queue backs up. */
  readonly webhookLagging: number
  readonly webhookNoAnswer: number
  /** Outage windows per endpoint per virtual day (each 5 min to 3 h, every attempt fails). */
  readonly webhookOutagesPerDay: number
  /** Store operations that fail with `StoreUnavailable` before they run (nothing changes). */
  readonly storeUnavailable: number
  /**
   * Payment commits (create, change) that commit but answer `StoreUnavailable`: the connection
   * died before the commit was acknowledged, so the caller cannot tell whether it happened.
   */
  readonly storeLostCommit: number
  /** Store outage windows per virtual day (each 1 s to 90 s, every store operation fails). */
  readonly storeOutagesPerDay: number
  /**
   * API key rotations that commit but answer `StoreUnavailable` (drawn on their own stream, after
   * `storeLostCommit`): the old key is revoked and the merchant does not know it; its client retries
   * the rotation with the old key, which must be refused at once (CONTRACT section 4). Absent: none.
   */
  readonly rotationLost?: number
  /**
   * Committing operations (payment create/change, a stored idempotent response) right after which
   * the process crashes, before anything else runs: the reply never reaches the client.
   */
  readonly crashAfterCommit: number
  /** Payments the network disputes (of those captured whose merchant script ended), sim/world/Disputes.ts. */
  readonly disputes?: number
  /**
   * Instance pauses per virtual hour (a stop-the-world GC pause, a frozen VM, SIGSTOP): the running
   * instance stops for 61 s–4 min, longer than the idempotency and webhook leases (60 s), while a
   * replacement serves; then it resumes and carries on with whatever it held (sim/world/Service.ts `pause`).
   */
  readonly pausesPerHour: number
  /**
   * Database freezes per virtual day (each 40 s–3 min): every main-store call hangs; its caller gives
   * up after the statement bound (`storeCallTimeoutMs`) with `StoreUnavailable`, and what the
   * database received runs when it thaws, in the order received (sim/world/StoreFaults.ts).
   */
  readonly storeFreezesPerDay: number
  /**
   * Largest clock offset of an instance, in ms: each instance's clock runs ahead or behind virtual
   * time by up to this much, fixed for its life, so two instances disagree by up to twice it
   * (docs/operations.md states the tolerance: 1 s between any two processes).
   */
  readonly clockSkewMs: number
  /**
   * The remote processor's faults (sim/world/Processor.ts), drawn only when the run has one
   * (`SimOptions.processor`): calls answered by the processor after it acted, with the answer lost
   * (the caller sees an unknown outcome); calls that arrive twice (the duplicate meets the first's
   * idempotency key); calls answered after the caller's deadline (acted, then unknown); and
   * outage windows per virtual day (10 s–3 min each, every call unreachable). Absent: none.
   */
  readonly processorLost?: number
  readonly processorDuplicate?: number
  readonly processorLate?: number
  readonly processorOutagesPerDay?: number
}

export interface WorkloadMix {
  readonly manualCapture: number
  readonly idempotencyKey: number
  readonly duplicateCreate: number
  readonly keyReuseMismatch: number
  readonly refund: number
  readonly overRefund: number
  readonly racingOperations: number
  readonly review: number
  readonly keyRotationsPerMerchantDay: number
  readonly riskyTokens: number
  readonly declineTokens: number
  /**
   * Payments made with the sandbox's dispute tokens (`tok_dispute_won`, `tok_dispute_lost`): the
   * harness against a remote target, where no card network of its own can dispute. The
   * simulator's card network is sim/world/Disputes.ts (absent: none).
   */
  readonly disputeTokens?: number
  /**
   * How keyed creates send their key (sim/world/Workload.ts; the rest send it in the header only):
   * only in the body (`transaction.idempotency_key`), in both, or in both with different values
   * first (422, then sent again in the header). Absent: none.
   */
  readonly bodyKey?: number
  readonly bothKeys?: number
  readonly differentKeys?: number
  /** Captured payments the card network disputes while the merchant's script still runs (sim/world/Disputes.ts `openNow`). */
  readonly disputeDuringScript?: number
  /**
   * Of those, the share whose script waits for the dispute's outcome (the network resolves it at
   * once, `resolveNow`) and then refunds: after a lost one, sometimes into the charged-back money.
   */
  readonly refundAfterDispute?: number
  /** Payments whose amount and card are chosen to put the fraud score on a threshold (sim/world/Boundary.ts). */
  readonly boundaryScores?: number
  /**
   * Webhook backlogs per virtual day (sim/engine/Simulator.ts): a merchant's endpoint answers in
   * 10–29 s for 20 minutes while the merchant sends a batch of 40 payments at once, so claims wait
   * in the endpoint's queue past their 60 s lease and are taken over. Absent: none.
   */
  readonly endpointBacklogsPerDay?: number
  /**
   * Keys pushed past their rate limit per virtual day (sim/engine/Simulator.ts, `Workload.pushRateLimit`):
   * a merchant's new key sends a burst of the bucket's size and a fifth more at once, then twice the
   * refill rate for half a second. Absent: none.
   */
  readonly rateLimitPushesPerDay?: number
}
