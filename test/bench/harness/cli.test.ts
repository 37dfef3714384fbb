import { describe, expect, it } from "vitest"
import { parseArguments } from "../../../bench/harness/Cli.ts"
import { evaluateSlo, parseSlo } from "../../../bench/harness/Slo.ts"

const error = (argv: Array<string>) => {
  const parsed = parseArguments(argv)
  return parsed.command === "error" ? parsed.message : `parsed as ${parsed.command}`
}

describe("the harness's command line", () => {
  it("has defaults a newcomer can run: the merchants scenario on an embedded service, open model", () => {
    const parsed = parseArguments([])
    expect(parsed).toMatchObject({
      command: "run",
      targetUrl: null,
      keysFile: null,
      scenario: "merchants",
      model: { kind: "open", rate: 50, arrival: "constant" },
      durationSeconds: 30,
      maxRequests: null,
      shard: { index: 0, count: 1 },
      webhookHost: "127.0.0.1",
      slo: [],
      merchants: 5
    })
    // One merchant per 20 requests a second of the open model, at least 5.
    expect(parseArguments(["--rate", "200"])).toMatchObject({ merchants: 10 })
    expect(parseArguments(["--rate", "201", "--merchants", "3"])).toMatchObject({ merchants: 3 })
    expect(parseArguments(["--connections", "64"])).toMatchObject({ merchants: 5 })
  })

  it("reads every flag, with a space or an equals sign", () => {
    const parsed = parseArguments([
      "--target",
      "http://staging.example:8080/",
      "--keys=keys.txt",
      "--rate",
      "250.5",
      "--arrival",
      "poisson",
      "--duration",
      "90",
      "--merchants",
      "12",
      "--seed",
      "42",
      "--webhook-host",
      "10.0.0.5",
      "--report",
      "out",
      "--slo",
      "p99<250ms, errors<0.1%",
      "--shard",
      "2/4",
      "--scenario",
      "merchants",
      "--max-requests",
      "5000",
      "--progress"
    ])
    expect(parsed).toMatchObject({
      command: "run",
      targetUrl: "http://staging.example:8080",
      keysFile: "keys.txt",
      model: { kind: "open", rate: 250.5, arrival: "poisson" },
      durationSeconds: 90,
      merchants: 12,
      seed: 42,
      webhookHost: "10.0.0.5",
      reportDirectory: "out",
      sloText: "p99<250ms, errors<0.1%",
      shard: { index: 2, count: 4 },
      maxRequests: 5000,
      progress: true
    })
    expect(parseArguments(["--connections", "16"])).toMatchObject({ model: { kind: "closed", connections: 16 } })
  })

  it("refuses a bad flag with a message that names it", () => {
    expect(error(["--duration", "abc"])).toBe("--duration must be a number above 0 and at most 86400, not 'abc'")
    expect(error(["--duration", "0"])).toContain("--duration must be a number above 0")
    expect(error(["--duration", "-5"])).toContain("--duration must be")
    expect(error(["--duration", "1e3"])).toContain("--duration must be")
    expect(error(["--duration"])).toBe("Missing value for flag --duration. Expected: string")
    expect(error(["--duration", "--rate", "5"])).toContain("--duration")
    expect(error(["--rate", "NaN"])).toContain("--rate must be")
    expect(error(["--rate", "5", "--connections", "2"])).toContain("exclude each other")
    expect(error(["--target", "http://staging.example", "--keys", "k.txt", "--profile", "/tmp/p"])).toContain(
      "--profile profiles the service the harness starts"
    )
    expect(error(["--target", "http://staging.example", "--keys", "k.txt", "--statements", "10"])).toContain(
      "--statements reads the database the harness starts"
    )
    expect(error(["--statements", "ten"])).toContain("--statements must be a whole number")
    expect(error(["--connections", "2.5"])).toContain("--connections must be a whole number")
    expect(error(["--arrival", "burst"])).toContain("--arrival must be constant or poisson")
    expect(error(["--merchants", "0"])).toContain("--merchants must be a whole number from 1")
    expect(error(["--max-requests", "ten"])).toContain("--max-requests must be a whole number")
    expect(error(["--shard", "4/4"])).toContain("--shard must be I/N")
    expect(error(["--shard", "1"])).toContain("--shard must be I/N")
    expect(error(["--target", "localhost:3000"])).toContain("--target must be")
    expect(error(["--target", "ftp://x"])).toContain("--target must be an http or https URL")
    expect(error(["--target", "http://x"])).toContain("--target needs --keys FILE")
    expect(error(["--keys", "k.txt"])).toContain("--keys goes with --target")
    expect(error(["--scenario", "../etc"])).toContain("--scenario must be a name")
    expect(error(["--slo", "p98<3ms"])).toContain("--slo: cannot read 'p98<3ms'")
    expect(error(["--seed", "1", "--seed", "2"])).toContain("--seed")
    expect(error(["--colour"])).toBe("Unrecognized flag: --colour in command harness")
    expect(error(["stray"])).toContain(`Unknown subcommand "stray"`)
  })

  it("reads where the webhook receiver listens (--webhook-port) and what it advertises (--webhook-url)", () => {
    expect(parseArguments([])).toMatchObject({ webhookHost: "127.0.0.1", webhookPort: 0, webhookUrl: null })
    expect(
      parseArguments([
        "--webhook-host",
        "0.0.0.0",
        "--webhook-port",
        "9000",
        "--webhook-url",
        "https://hooks.example:8443/harness/"
      ])
    ).toMatchObject({
      webhookHost: "0.0.0.0",
      webhookPort: 9000,
      webhookUrl: "https://hooks.example:8443/harness"
    })
    // A pinned port alone: registered as http://<webhook-host>:<port>.
    expect(parseArguments(["--webhook-host", "10.0.0.5", "--webhook-port", "9000"])).toMatchObject({
      webhookHost: "10.0.0.5",
      webhookPort: 9000,
      webhookUrl: null
    })
    // {shard} stands for the shard's index, as in `keys --webhook-url`.
    expect(
      parseArguments([
        "--shard",
        "2/4",
        "--webhook-port",
        "9000",
        "--webhook-url",
        "http://harness-{shard}.example:9000"
      ])
    ).toMatchObject({ webhookUrl: "http://harness-2.example:9000" })
    expect(error(["--webhook-url", "http://hooks.example"])).toBe(
      "--webhook-url advertises a receiver the target reaches through NAT, a proxy or another host, which forwards to a port known in advance: give --webhook-port too"
    )
    expect(error(["--webhook-port", "65536"])).toBe(
      "--webhook-port must be a whole number from 0 to 65535, not '65536'"
    )
    expect(error(["--webhook-port", "http"])).toContain("--webhook-port must be a whole number")
    expect(error(["--webhook-port", "9000", "--webhook-url", "hooks.example"])).toBe(
      "--webhook-url must be a URL such as http://203.0.113.7:9000, not 'hooks.example'"
    )
    expect(error(["--webhook-port", "9000", "--webhook-url", "hooks.example:9000"])).toContain(
      "--webhook-url must be an http or https URL"
    )
    expect(error(["--webhook-port", "9000", "--webhook-url", "ftp://hooks.example"])).toContain(
      "--webhook-url must be an http or https URL"
    )
    expect(error(["--webhook-port", "9000", "--webhook-url", "http://hooks.example/?a=1"])).toContain(
      "without query, fragment or credentials"
    )
  })

  it("lets the health scenario run against a target without keys", () => {
    expect(parseArguments(["--target", "http://127.0.0.1:3000", "--scenario", "health"])).toMatchObject({
      command: "run",
      keysFile: null
    })
  })

  it("reads merge and help", () => {
    expect(parseArguments(["merge", "a.json", "b.json", "--report", "out"])).toEqual({
      command: "merge",
      files: ["a.json", "b.json"],
      reportDirectory: "out"
    })
    expect(error(["merge"])).toContain("Missing required argument: file")
    expect(error(["merge", "a.json", "--rate", "5"])).toContain("merge: Unrecognized flag: --rate")
    const help = parseArguments(["--help"])
    expect(help).toMatchObject({ command: "help" })
    // Every flag in the help, with its default.
    const text = help.command === "help" ? help.text : ""
    for (
      const flag of [
        "--target",
        "--keys",
        "--rate",
        "--arrival",
        "--connections",
        "--duration",
        "--max-requests",
        "--merchants",
        "--seed",
        "--scenario",
        "--shard",
        "--start-at",
        "--webhook-host",
        "--webhook-port",
        "--webhook-url",
        "--report",
        "--slo",
        "--timeout",
        "--sockets",
        "--drain",
        "--profile",
        "--statements",
        "--progress"
      ]
    ) {
      expect(text).toContain(flag)
    }
    expect(text).toMatch(/--duration string\s+seconds of load \(default: 30\)/)
    expect(text).toMatch(/^\s+merge\s/m)
    expect(parseArguments(["--rate", "5", "--help"])).toMatchObject({ command: "help" })
  })
})

describe("--slo", () => {
  it("reads percentiles, errors and rate", () => {
    const parsed = parseSlo("p50<20ms, p99<250ms,p999<1.5s,max<2s,errors<0.1%,rate>100")
    expect("objectives" in parsed && parsed.objectives).toEqual([
      { text: "p50<20ms", route: null, kind: "latency", percentile: "p50", limitMs: 20 },
      { text: "p99<250ms", route: null, kind: "latency", percentile: "p99", limitMs: 250 },
      { text: "p999<1.5s", route: null, kind: "latency", percentile: "p999", limitMs: 1500 },
      { text: "max<2s", route: null, kind: "latency", percentile: "max", limitMs: 2000 },
      { text: "errors<0.1%", route: null, kind: "errors", limitPercent: 0.1 },
      { text: "rate>100", route: null, kind: "rate", minimum: 100 }
    ])
    expect(parseSlo("p99 < 250ms")).not.toHaveProperty("error")
    for (const bad of ["p99<250", "p99>250ms", "errors<0.1", "rate<5", "p99<-1ms", "", "latency<5ms"]) {
      expect(parseSlo(bad)).toHaveProperty("error")
    }
  })

  it("is met only strictly under each limit, and never by a run without requests", () => {
    const slo = parseSlo("p99<250ms,errors<1%,rate>100")
    if ("error" in slo) throw new Error(slo.error)
    const figures = {
      requests: 1000,
      errors: 9,
      rate: 150,
      latency_ms: { p50: 5, p90: 50, p99: 249.9, p999: 400, max: 900 }
    }
    expect(evaluateSlo(slo.objectives, figures).map((r) => r.met)).toEqual([true, true, true])
    expect(
      evaluateSlo(slo.objectives, {
        ...figures,
        errors: 10,
        rate: 100,
        latency_ms: { ...figures.latency_ms, p99: 250 }
      })
    )
      .toEqual([
        { objective: "p99<250ms", route: null, measured_ms: 250, met: false },
        { objective: "errors<1%", route: null, measured_percent: 1, met: false },
        { objective: "rate>100", route: null, measured_per_s: 100, met: false }
      ])
    expect(evaluateSlo(slo.objectives, { ...figures, requests: 0, errors: 0 }).slice(0, 2).map((r) => r.met)).toEqual([
      false,
      false
    ])
  })
})
