#!/usr/bin/env node
/**
 * The keep-alive race behind requests recorded as `dropped` with no fault injected: a server
 * closes an idle kept-alive socket (Node's: 1 s after its keepAliveTimeout) while the client,
 * busy, has not yet read the FIN and writes its next request on it; the server answers the write
 * with a reset, and the request's outcome is unknown. A server in a child process with a 2 s
 * keep-alive; the client idles 2.96 s, then is busy 100 ms across the server's close, then sends.
 *
 *   node scripts/keepalive-race.mjs          # an agent without a timeout: every request reset
 *   node scripts/keepalive-race.mjs fixed    # with the harness's idle timeout: none
 */
import { fork } from "node:child_process"
import http from "node:http"
import { fileURLToPath } from "node:url"

if (process.argv[2] === "server") {
  const server = http.createServer((_request, response) => response.writeHead(204).end())
  server.keepAliveTimeout = 2000
  server.listen(0, "127.0.0.1", () => process.send(server.address().port))
} else {
  const fixed = process.argv[2] === "fixed"
  const child = fork(fileURLToPath(import.meta.url), ["server"])
  const port = await new Promise((listening) => child.once("message", listening))
  // The harness's agent (bench/harness/Transport.ts) has `timeout`: 4 s, lowered by the server's Keep-Alive hint.
  const agent = new http.Agent({ keepAlive: true, ...(fixed ? { timeout: 4000 } : {}) })
  const get = () =>
    new Promise((done) => {
      const request = http.get({ agent, port, host: "127.0.0.1" }, (response) => {
        response.resume()
        response.on("end", () => done(`answered${request.reusedSocket ? " (kept-alive socket)" : " (new connection)"}`))
      })
      request.on("error", (error) => done(`${error.code}${request.reusedSocket ? " on a kept-alive socket" : ""}`))
    })
  const outcomes = []
  for (let i = 0; i < 5; i++) {
    await get()
    await new Promise((idle) => setTimeout(idle, 2960))
    const until = performance.now() + 100
    while (performance.now() < until) { /* busy across the server's close at 3 s */ }
    outcomes.push(await get())
  }
  console.log(`${process.version}, agent ${fixed ? "with timeout 4000 ms" : "without timeout"}: ${outcomes.join("; ")}`)
  agent.destroy()
  child.kill()
}
