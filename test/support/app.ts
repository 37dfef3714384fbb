import { NodeHttpServer } from "@effect/platform-node"
import { Context, Deferred, Effect, Layer, Logger, ManagedRuntime, Metric, References } from "effect"
import { HttpMiddleware, HttpRouter, HttpServer } from "effect/http"
import * as Statement from "effect/sql/Statement"
import { request as httpRequest } from "node:http"
import pg from "pg"
import * as Acquirer from "../../src/acquirer/Acquirer.ts"
import { HttpRoutesLive, ServicesLive } from "../../src/App.ts"
import { createHttpServer } from "../../src/http/server/NodeResponse.ts"
import * as Config from "../../src/platform/Config.ts"
import * as Ids from "../../src/platform/Ids.ts"
import type { ApiKeys } from "../../src/services/ApiKeys.ts"
import { Merchants } from "../../src/services/Merchants.ts"
import type { Payments } from "../../src/services/Payments.ts"
import { layerPg } from "../../src/store/PgStore.ts"
import { Store, type StoreShape } from "../../src/store/Store.ts"
import type { WebhookStore } from "../../src/store/WebhookStore.ts"
import { freshDatabase, pgLayer, testEncryptionKey } from "./database.ts"

/** What tests may call directly besides the HTTP API (settlement, the store for checks). */
export type AppServices = Payments | Merchants | ApiKeys | Store | Config.AppConfig

export interface TestMerchant {
  readonly merchantId: string
  /** The full `sk_live_` secret of the merchant's first API key. */
  readonly key: string
  readonly webhookSecret: string
}

export interface TestApp {
  readonly baseUrl: string
  readonly databaseUrl: string
  readonly createMerchant: (name?: string) => Promise<TestMerchant>
  /** Runs an effect against the app's own services (same database, same in-process actors). */
  readonly run: <A, E>(effect: Effect.Effect<A, E, AppServices>) => Promise<A>
  /** Plain SQL against the app's database, for checks the API does not expose. */
  readonly query: <Row = Record<string, any>>(text: string, params?: ReadonlyArray<unknown>) => Promise<Array<Row>>
  readonly close: () => Promise<void>
}

export interface AppOptions {
  /** Configuration overrides; nothing is read from the environment. */
  readonly config?: Partial<Config.AppConfigShape>
  /** The card network; the sandbox acquirer unless a test needs to hold authorizations. */
  readonly acquirer?: Layer.Layer<Acquirer.Acquirer>
  readonly label?: string
  /** Serve an existing database (a second instance of the service) instead of a fresh one. */
  readonly databaseUrl?: string
  /** Sees every statement of Effect's PostgreSQL driver before it runs (e.g. to count them). */
  readonly sqlTransformer?: Statement.Transformer
  /** Told of every child fiber the app starts and ends (e.g. to count fibers per request). */
  readonly fiberMetrics?: Metric.FiberRuntimeMetricsService
  /** Wraps the PostgreSQL store (e.g. to make one operation fail). */
  readonly wrapStore?: (store: StoreShape) => StoreShape
  /**
   * The app's only logger, at Info level (e.g. one that captures lines). Without it the app logs
   * warnings and errors only: a line per request would drown the test output.
   */
  readonly logger?: Logger.Logger<unknown, void>
}

/**
 * Tests share one API key per merchant and fire bursts; the rate limit has its own test. The
 * encryption key is set, as in production, so webhook secrets are sealed at rest.
 */
const testDefaults: Partial<Config.AppConfigShape> = {
  rateLimitPerSecond: 100_000,
  responseEncryptionKey: testEncryptionKey
}

/**
 * The real service (HttpApi routes, services, PostgreSQL store) on a fresh database, listening
 * on a free port of 127.0.0.1. Background workers are not started: tests drive settlement and
 * recovery through the services, so nothing happens on a timer behind their back.
 */
export const startApp = async (options: AppOptions = {}): Promise<TestApp> => {
  const databaseUrl = options.databaseUrl ?? await freshDatabase(options.label ?? "app")
  const config = Config.defaultsWith({ ...testDefaults, databaseUrl, ...options.config })
  const wrapStore = options.wrapStore
  const storeLayer = wrapStore === undefined
    ? layerPg
    : Layer.effectContext(
      Effect.map(
        Effect.context<Store | WebhookStore>(),
        (context) => Context.add(context, Store, wrapStore(Context.get(context, Store)))
      )
    ).pipe(Layer.provide(layerPg))
  const infrastructure = storeLayer.pipe(
    Layer.provideMerge(pgLayer(databaseUrl)),
    Layer.provideMerge(Layer.mergeAll(Ids.layer, options.acquirer ?? Acquirer.layerSandbox)),
    Layer.provideMerge(Config.layerWith(config))
  )
  const server = HttpRouter.serve(HttpRoutesLive, { disableLogger: true }).pipe(
    Layer.provide(Layer.succeed(HttpMiddleware.TracerDisabledWhen, () => true)),
    Layer.provideMerge(NodeHttpServer.layer(createHttpServer, { port: 0, host: "127.0.0.1" }))
  )
  const appLayer = server.pipe(
    Layer.provideMerge(ServicesLive),
    Layer.provideMerge(infrastructure),
    Layer.provide(
      options.fiberMetrics === undefined ? Layer.empty : Layer.succeed(Metric.FiberRuntimeMetrics, options.fiberMetrics)
    ),
    Layer.provide(
      options.sqlTransformer === undefined
        ? Layer.empty
        : Layer.succeed(Statement.CurrentTransformer, options.sqlTransformer)
    ),
    Layer.provide(
      options.logger === undefined
        ? Layer.succeed(References.MinimumLogLevel, "Warn")
        : Layer.merge(Logger.layer([options.logger]), Layer.succeed(References.MinimumLogLevel, "Info"))
    )
  )
  const runtime = ManagedRuntime.make(appLayer)
  const address = await runtime.runPromise(Effect.map(HttpServer.HttpServer, (s) => s.address))
  if (address._tag === "UnixPathAddress") throw new Error("expected a TCP address")
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 3 })

  return {
    baseUrl: `http://127.0.0.1:${address.port}`,
    databaseUrl,
    createMerchant: (name = "Test Merchant") =>
      runtime.runPromise(
        Effect.flatMap(Merchants, (merchants) => merchants.create({ name, webhookUrl: null })).pipe(
          Effect.map((created) => ({
            merchantId: created.merchant.id,
            key: created.secret,
            webhookSecret: created.merchant.webhookSecret
          }))
        )
      ),
    run: (effect) => runtime.runPromise(effect),
    query: async (text, params = []) => (await pool.query(text, [...params])).rows,
    close: async () => {
      await runtime.dispose()
      await pool.end()
    }
  }
}

// ---------------------------------------------------------------------------------------------
// A small HTTP client over fetch: tests see status, headers and the raw body text.

export interface Reply<B = any> {
  readonly status: number
  readonly headers: Headers
  readonly text: string
  readonly body: B
}

export interface RequestOptions {
  /** A value sent as JSON with `Content-Type: application/json`. */
  readonly json?: unknown
  /** A raw body sent as is (set the content type yourself in `headers`). */
  readonly raw?: string
  readonly headers?: Record<string, string>
  readonly idempotencyKey?: string
  /** The API key; `null` sends no Authorization header. */
  readonly key?: string | null
}

export const request = async (
  baseUrl: string,
  method: string,
  path: string,
  options: RequestOptions = {}
): Promise<Reply> => {
  const headers: Record<string, string> = { ...options.headers }
  if (options.key !== undefined && options.key !== null) headers["authorization"] = `Bearer ${options.key}`
  if (options.idempotencyKey !== undefined) headers["x-idempotency-key"] = options.idempotencyKey
  let body: string | undefined = options.raw
  if (options.json !== undefined) {
    body = JSON.stringify(options.json)
    headers["content-type"] ??= "application/json"
  }
  const response = await fetch(`${baseUrl}${path}`, { method, headers, ...(body === undefined ? {} : { body }) })
  const text = await response.text()
  let parsed: unknown
  try {
    parsed = text === "" ? undefined : JSON.parse(text)
  } catch {
    parsed = undefined
  }
  return { status: response.status, headers: response.headers, text, body: parsed }
}

/** A client bound to one app and one API key. */
export const client = (baseUrl: string, key: string | null) => {
  const send = (method: string, path: string, options: Omit<RequestOptions, "key"> = {}) =>
    request(baseUrl, method, path, { ...options, key })
  return {
    send,
    get: (path: string, options: Omit<RequestOptions, "key"> = {}) => send("GET", path, options),
    post: (path: string, json?: unknown, options: Omit<RequestOptions, "key" | "json"> = {}) =>
      send("POST", path, json === undefined ? options : { ...options, json }),
    patch: (path: string, json: unknown, options: Omit<RequestOptions, "key" | "json"> = {}) =>
      send("PATCH", path, { ...options, json })
  }
}
export type Client = ReturnType<typeof client>

export interface TransactionFields {
  readonly amount_cents?: number
  readonly currency?: string
  readonly card_token?: string
  readonly card_last_four?: string
  readonly card_brand?: string
  readonly capture_method?: "automatic" | "manual"
  readonly idempotency_key?: string
  readonly metadata?: Record<string, string>
  readonly [extra: string]: unknown
}

/** A valid create body; fields override the defaults. */
export const transactionBody = (fields: TransactionFields = {}) => ({
  transaction: {
    amount_cents: 10_000,
    currency: "USD",
    card_token: "tok_visa",
    card_last_four: "4242",
    card_brand: "visa",
    ...fields
  }
})

/** Creates a transaction and insists on 201; returns the record. */
export const createTransaction = async (api: Client, fields: TransactionFields = {}, idempotencyKey?: string) => {
  const reply = await api.post(
    "/api/v1/transactions",
    transactionBody(fields),
    idempotencyKey === undefined ? {} : { idempotencyKey }
  )
  if (reply.status !== 201) throw new Error(`create answered ${reply.status}: ${reply.text}`)
  return reply.body.transaction as Record<string, any>
}

/** Asserts the CONTRACT error envelope and returns the error object. */
export const errorOf = (reply: Reply) => {
  const error = reply.body?.error
  if (error === undefined || typeof error !== "object") {
    throw new Error(`expected an error body, got ${reply.status}: ${reply.text}`)
  }
  return error as { type: string; code: string; message: string; param?: string; request_id: string }
}

/** Debits minus credits per ledger group (and currency): every value must be zero. */
export const unbalancedGroups = (
  entries: ReadonlyArray<{ group_id: string; direction: string; amount_cents: number; currency: string }>
) => {
  const sums = new Map<string, number>()
  for (const e of entries) {
    const k = `${e.group_id}:${e.currency}`
    sums.set(k, (sums.get(k) ?? 0) + (e.direction === "debit" ? e.amount_cents : -e.amount_cents))
  }
  return [...sums].filter(([, sum]) => sum !== 0)
}

/**
 * Polls `check` until it returns a value other than undefined: for work the service finishes in
 * the background (a released flow, a restarted process). Bounded; never a bare sleep.
 */
export const eventually = async <A>(
  check: () => Promise<A | undefined>,
  options: { readonly timeoutMs?: number; readonly intervalMs?: number; readonly what?: string } = {}
): Promise<A> => {
  const timeoutMs = options.timeoutMs ?? 5_000
  const intervalMs = options.intervalMs ?? 20
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await check()
    if (value !== undefined) return value
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${options.what ?? "a condition"}`)
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs))
  }
}

/**
 * A request through node:http, for what fetch will not send: a body without Content-Type, or a
 * chunked body without Content-Length. Resolves with the reply, or with the transport error
 * when the server cut the connection.
 */
export const rawRequest = (
  baseUrl: string,
  options: {
    readonly method: string
    readonly path: string
    readonly headers?: Record<string, string>
    readonly chunks?: ReadonlyArray<string>
  }
): Promise<
  { status: number; headers: Record<string, string | string[] | undefined>; text: string } | { error: string }
> =>
  new Promise((resolve) => {
    const url = new URL(options.path, baseUrl)
    const req = httpRequest(url, { method: options.method, headers: options.headers ?? {} }, (res) => {
      let text = ""
      res.setEncoding("utf8")
      res.on("data", (chunk) => (text += chunk))
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text }))
      res.on("error", (error) => resolve({ error: String(error) }))
    })
    req.on("error", (error) => resolve({ error: String(error) }))
    for (const chunk of options.chunks ?? []) req.write(chunk)
    req.end()
  })

/**
 * The sandbox acquirer, except that `tok_gated` authorizations wait until the test opens the
 * gate: a request is then provably in flight, without sleeping.
 */
export const gatedAcquirer = () => {
  const entered = Effect.runSync(Deferred.make<void>())
  const gate = Effect.runSync(Deferred.make<void>())
  const layer = Layer.succeed(Acquirer.Acquirer, {
    authorize: (request) =>
      request.cardToken === "tok_gated"
        ? Deferred.succeed(entered, undefined).pipe(
          Effect.andThen(Deferred.await(gate)),
          Effect.andThen(Acquirer.sandboxAuthorize(request))
        )
        : Acquirer.sandboxAuthorize(request)
  })
  return {
    layer,
    entered: () => Effect.runPromise(Deferred.await(entered)),
    open: () => Effect.runPromise(Deferred.succeed(gate, undefined))
  }
}
