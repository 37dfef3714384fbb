import { HttpServerResponse } from "effect/http"

/** Without headers of its own a response shares `Headers.empty` (no headers object built per response). */
export const jsonResponse = (status: number, body: string, headers?: Readonly<Record<string, string>>) =>
  HttpServerResponse.text(
    body,
    headers === undefined || isEmpty(headers)
      ? { status, contentType: "application/json" }
      : { status, contentType: "application/json", headers }
  )

const isEmpty = (record: Readonly<Record<string, string>>) => {
  for (const _ in record) return false
  return true
}
