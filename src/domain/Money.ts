/** Money is always an integer count of minor units (cents, or yen for JPY). */
export const supportedCurrencies = ["USD", "EUR", "GBP", "CAD", "AUD", "JPY"] as const
export type Currency = (typeof supportedCurrencies)[number]

export const minimumAmountCents = 1
export const maximumAmountCents = 99_999_999

export const isCurrency = (value: string): value is Currency =>
  (supportedCurrencies as ReadonlyArray<string>).includes(value)

/**
 * Processing fee for a capture: a percentage in basis points plus a fixed part per currency,
 * never more than the amount itself. Integer arithmetic only, half-up rounding.
 */
export const feePercentBasisPoints = 290
export const fixedFeeCents: Record<Currency, number> = { USD: 30, EUR: 25, GBP: 20, CAD: 30, AUD: 30, JPY: 0 }

export const processingFeeCents = (amountCents: number, currency: Currency): number => {
  const percentPart = Math.floor((amountCents * feePercentBasisPoints + 5_000) / 10_000)
  return Math.min(amountCents, percentPart + fixedFeeCents[currency])
}

/**
 * The fee the network charges the merchant for a lost dispute (chargeback), per currency
 * (docs/api.md). Not charged when the merchant wins.
 */
export const disputeFeeCents: Record<Currency, number> = {
  USD: 1500,
  EUR: 1500,
  GBP: 1500,
  CAD: 1500,
  AUD: 2500,
  JPY: 2000
}
