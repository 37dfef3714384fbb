/** The load scenarios of `npm run bench` (bench/run.ts), which `npm run bench:ab` (bench/ab.ts) runs by name. */
export const benchScenarios = [
  "create",
  "read",
  "mixed",
  "refund",
  "idempotent-retry",
  "webhooks",
  "health",
  "analytics"
] as const
export type BenchScenario = (typeof benchScenarios)[number]
