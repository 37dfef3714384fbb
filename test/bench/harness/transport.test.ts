import { createServer, Server } from "node:http"
import type { AddressInfo } from "node:net"
import { describe, expect, it } from "vitest"
import { AvailabilityRecorder } from "../../../bench/harness/Availability.ts"
import { VirtualClock } from "../../../bench/harness/Clock.ts"
import type { WireRequest } from "../../../bench/harness/Contract.ts"
import { Recorder } from "../../../bench/harness/Recorder.ts"
import {
  balancedClient,
  httpClient,
  idleSocketTimeoutMs,
  recordingTransport,
  type WireClient,
  type WireOutcome
} from "../../../bench/harness/Transport.ts"
import { freePort } from "../../../src/platform/Database.ts"

const request: WireRequest = { method: "GET", path: "/healthz", headers: {}, body: null }
const answered = (status: number): WireOutcome => ({ _tag: "Answered", response: { status, headers: {}, body: "" } })

/** Instances as `fate` says at each request: each records which requests reached it. */
const fakeInstances = (count: number, fate: (instance: number, call: number) => WireOutcome) => {
  const calls: Array<number> = []
  const clients: Array<WireClient> = Array.from({ length: count }, (_, instance) => ({
    send: async () => {
      calls.push(instance)
      return fate(instance, calls.length)
    },
    close: () => {}
  }))
  return { clients, calls }
}

describe("spreading requests over the instances", () => {
  it("sends each request to the next instance in turn", async () => {
    const { clients, calls } = fakeInstances(3, (instance) => answered(200 + instance))
    const client = balancedClient(clients)
    const statuses: Array<number> = []
    for (let i = 0; i < 7; i++) {
      const outcome = await client.send(request)
      statuses.push(outcome._tag === "Answered" ? outcome.response.status : -1)
    }
    expect(calls).toEqual([0, 1, 2, 0, 1, 2, 0])
    expect(statuses).toEqual([200, 201, 202, 200, 201, 202, 200])
    expect(client.movedOn()).toBe(0)
  })

  it("sends a request whose connection was refused on to the next live instance, as a load balancer does", async () => {
    // Instance 1 is down: nothing listens there.
    const { clients, calls } = fakeInstances(3, (instance) => (instance === 1 ? { _tag: "Refused" } : answered(200)))
    const client = balancedClient(clients)
    const outcomes = [await client.send(request), await client.send(request), await client.send(request)]
    expect(outcomes.map((o) => o._tag)).toEqual(["Answered", "Answered", "Answered"])
    // The second request went to 1, was refused, and went on to 2; the third is 2's by turn.
    expect(calls).toEqual([0, 1, 2, 2])
    expect(client.movedOn()).toBe(1)
  })

  it("leaves a request that was sent and got no answer to the scenario: it is not sent again", async () => {
    const { clients, calls } = fakeInstances(3, (instance) => (instance === 0 ? { _tag: "Lost" } : answered(200)))
    const client = balancedClient(clients)
    expect((await client.send(request))._tag).toBe("Lost")
    expect(calls).toEqual([0])
    expect(client.movedOn()).toBe(0)
  })

  it("tries each instance once: refused by all is refused", async () => {
    const { clients, calls } = fakeInstances(3, () => ({ _tag: "Refused" }))
    const client = balancedClient(clients)
    expect((await client.send(request))._tag).toBe("Refused")
    expect(calls).toEqual([0, 1, 2])
    expect((await client.send(request))._tag).toBe("Refused")
    expect(calls).toEqual([0, 1, 2, 1, 2, 0])
    expect(client.movedOn()).toBe(4)
  })

  it("records a refused request as refused, a lost one as dropped, both as no answer to the scenario, and counts their availability", async () => {
    const clock = new VirtualClock(0)
    const fates: Array<WireOutcome> = [
      answered(200),
      { _tag: "Refused" },
      { _tag: "Lost" },
      answered(503),
      answered(404)
    ]
    let next = 0
    const client: WireClient = {
      send: async () => {
        await clock.sleep(10)
        return fates[next++]!
      },
      close: () => {}
    }
    const recorder = new Recorder(0)
    const availability = new AvailabilityRecorder(0)
    const transport = recordingTransport(client, clock, { recorder, availability }, 1)
    const answers = await clock.run(Promise.all(fates.map(() => transport.send(request, null))))
    expect(answers.map((a) => a?.status ?? null)).toEqual([200, null, null, 503, 404])
    const figures = recorder.finish(clock.now())
    expect(figures.status_codes).toEqual({ "200": 1, "refused": 1, "dropped": 1, "503": 1, "404": 1 })
    expect(figures.errors).toBe(3)
    // Counted by when each was handed over (all at 0 here, queued behind one socket).
    expect(availability.overall()).toEqual({
      requests: 5,
      answered: 2,
      server_errors: 1,
      dropped: 1,
      refused: 1,
      availability: 0.4
    })
  })
})

describe("socket wait apart from service time", () => {
  it("counts a request's turn behind the one socket and the agent's wait as socket wait, the rest as service time", async () => {
    const clock = new VirtualClock(0)
    // Each exchange: 3 ms in the agent before a socket is ready, 7 ms from the write to the answer.
    const client: WireClient = {
      send: async () => {
        await clock.sleep(10)
        return { _tag: "Answered", socketWaitMs: 3, response: { status: 200, headers: {}, body: "" } }
      },
      close: () => {}
    }
    const recorder = new Recorder(0)
    const transport = recordingTransport(client, clock, { recorder }, 1)
    // Three requests handed over at 0, one socket: they wait 0, 10 and 20 ms for their turn.
    await clock.run(Promise.all([0, 1, 2].map(() => transport.send(request, 0))))
    const figures = recorder.finish(clock.now())
    expect(figures.latency_ms.max).toBeCloseTo(30, 1)
    // As the histograms read them (3 significant digits).
    expect(figures.socket_wait_ms.p50).toBeCloseTo(13, 1)
    expect(figures.socket_wait_ms.max).toBeCloseTo(23, 1)
    expect(figures.service_ms.p50).toBeCloseTo(7, 1)
    expect(figures.service_ms.max).toBeCloseTo(7, 1)
    expect(figures.routes[0]!.service_ms!.p50).toBeCloseTo(7, 1)
  })

  it("measures the agent's wait on the real client: a second request waits for the only socket", async () => {
    let answer: (() => void) | null = null
    const server = createServer((_incoming, response) => {
      if (answer === null) answer = () => response.writeHead(204).end()
      else response.writeHead(204).end()
    })
    await new Promise<void>((listening) => server.listen(0, "127.0.0.1", listening))
    const client = httpClient(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, {
      sockets: 1,
      timeoutMs: 5_000
    })
    try {
      const first = client.send(request)
      const second = client.send(request)
      // The second cannot have a socket before the first is answered: its wait spans the first's
      // connect and exchange, which the server holds until the first request has reached it.
      while (answer === null) await new Promise((tick) => setImmediate(tick))
      ;(answer as () => void)()
      const [a, b] = await Promise.all([first, second])
      if (a._tag !== "Answered" || b._tag !== "Answered") throw new Error(`not answered: ${a._tag}, ${b._tag}`)
      expect(a.socketWaitMs).toBeGreaterThan(0)
      expect(b.socketWaitMs!).toBeGreaterThan(a.socketWaitMs!)
    } finally {
      client.close()
      await new Promise((closed) => server.close(closed))
    }
  })
})

describe("idle kept-alive sockets", () => {
  it("are closed by the harness before the server's keep-alive timeout would close them (a server closing first races the next write)", () => {
    // Node's server closes an idle socket 1 s after its keepAliveTimeout, which is 5 s by default.
    expect(idleSocketTimeoutMs).toBeLessThan(new Server().keepAliveTimeout)
  })

  it("the client ends an idle socket itself, with the server's keep-alive far longer", async () => {
    const server = createServer((_incoming, response) => response.writeHead(204).end())
    server.keepAliveTimeout = 600_000
    const clientEnded = new Promise<void>((ended) =>
      server.on("connection", (socket) => socket.once("end", () => ended()))
    )
    await new Promise<void>((listening) => server.listen(0, "127.0.0.1", listening))
    const client = httpClient(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, {
      sockets: 1,
      timeoutMs: 5_000,
      idleSocketTimeoutMs: 20
    })
    try {
      expect((await client.send(request))._tag).toBe("Answered")
      // The server would keep the socket ten minutes: an end before that is the client's.
      await clientEnded
      // A request after the close gets a new connection and its answer.
      expect((await client.send(request))._tag).toBe("Answered")
    } finally {
      client.close()
      await new Promise((closed) => server.close(closed))
    }
  })
})

describe("the HTTP client's outcomes", () => {
  it("tells a refused connection (nothing sent) from one reset after the request went out", async () => {
    const nobody = httpClient(`http://127.0.0.1:${await freePort()}`, { sockets: 1, timeoutMs: 5_000 })
    expect(await nobody.send(request)).toEqual({ _tag: "Refused" })
    nobody.close()
    // A server that reads the request and drops the connection: the request was sent, its outcome unknown.
    const server = createServer((incoming) => incoming.socket.destroy())
    await new Promise<void>((listening) => server.listen(0, "127.0.0.1", listening))
    const dropping = httpClient(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, {
      sockets: 1,
      timeoutMs: 5_000
    })
    try {
      expect(await dropping.send(request)).toEqual({ _tag: "Lost" })
    } finally {
      dropping.close()
      await new Promise((closed) => server.close(closed))
    }
  })
})

describe("availability by the time a request was sent", () => {
  it("reads any span of the load after the fact, to the 100 ms", () => {
    const availability = new AvailabilityRecorder(1_000)
    availability.record(200, 1_000)
    availability.record("refused", 1_250)
    availability.record("dropped", 1_399)
    availability.record(500, 2_000)
    availability.record(201, 9_999)
    expect(availability.between(200, 400)).toEqual({
      requests: 2,
      answered: 0,
      server_errors: 0,
      dropped: 1,
      refused: 1,
      availability: 0
    })
    expect(availability.between(0, 1_000)).toMatchObject({ requests: 3, answered: 1 })
    expect(availability.between(1_000, 1_100)).toMatchObject({ requests: 1, server_errors: 1 })
    expect(availability.between(5_000, 6_000)).toMatchObject({ requests: 0, availability: null })
    expect(availability.overall()).toMatchObject({ requests: 5, answered: 2, availability: 0.4 })
  })
})
