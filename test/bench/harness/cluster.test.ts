import { describe, expect, it } from "vitest"
import { parseArguments } from "../../../bench/harness/Cli.ts"

const error = (argv: Array<string>) => {
  const parsed = parseArguments(argv)
  return parsed.command === "error" ? parsed.message : `parsed as ${parsed.command}`
}

describe("the cluster's command line", () => {
  it("reads --instances, a --target list and the nemesis, with their defaults", () => {
    expect(parseArguments([])).toMatchObject({
      command: "run",
      instances: 1,
      targetUrls: [],
      targetUrl: null,
      nemesis: null
    })
    expect(parseArguments(["--instances", "3", "--nemesis", "kill,pause,db-pause", "--nemesis-every", "1500ms"]))
      .toMatchObject({ instances: 3, nemesis: { kinds: ["kill", "pause", "db-pause"], everyMs: 1_500 } })
    expect(parseArguments(["--nemesis", "kill"])).toMatchObject({ nemesis: { kinds: ["kill"], everyMs: 15_000 } })
    expect(parseArguments(["--nemesis", "pause, kill,pause"])).toMatchObject({ nemesis: { kinds: ["pause", "kill"] } })
    expect(parseArguments(["--target", "http://a.example:3000/, http://b.example:3001", "--keys", "k.txt"]))
      .toMatchObject({
        targetUrl: "http://a.example:3000",
        targetUrls: ["http://a.example:3000", "http://b.example:3001"],
        instances: 1
      })
    expect(parseArguments(["--target", "http://a.example:3000", "--keys", "k.txt"])).toMatchObject({
      targetUrls: ["http://a.example:3000"]
    })
  })

  it("refuses a bad value with exit 2 and a message naming the flag", () => {
    expect(error(["--instances", "0"])).toBe("--instances must be a whole number from 1 to 16, not '0'")
    expect(error(["--instances", "two"])).toContain("--instances must be a whole number")
    expect(error(["--instances", "17"])).toContain("--instances must be a whole number from 1 to 16")
    expect(error(["--target", "http://a.example", "--keys", "k.txt", "--instances", "2"])).toContain(
      "--instances starts the service N times: it does not go with --target"
    )
    expect(error(["--target", "http://a.example,b.example", "--keys", "k.txt"])).toContain("--target must be")
    expect(error(["--target", "http://a.example,", "--keys", "k.txt"])).toContain("--target must be a URL")
    expect(error(["--target", "http://a.example,ftp://b", "--keys", "k.txt"])).toContain(
      "--target must be an http or https URL, not 'ftp://b'"
    )
    expect(error(["--nemesis", "kill,explode"])).toBe(
      "--nemesis must be faults among kill, pause, db-pause separated by commas, not 'explode'"
    )
    expect(error(["--nemesis", ""])).toContain("--nemesis must be")
    expect(error(["--nemesis", "kill", "--nemesis-every", "15"])).toContain(
      "--nemesis-every must be a duration from 1s to 1h"
    )
    expect(error(["--nemesis", "kill", "--nemesis-every", "500ms"])).toContain("--nemesis-every must be")
    expect(error(["--nemesis", "kill", "--nemesis-every", "2h"])).toContain("--nemesis-every must be")
    expect(error(["--nemesis-every", "15s"])).toContain("--nemesis-every goes with --nemesis")
    // Kills and pauses need the processes in hand: not against a target the harness did not start.
    expect(error(["--target", "http://a.example", "--keys", "k.txt", "--nemesis", "kill"])).toContain(
      "--nemesis kills and pauses processes the harness started: it does not go with --target"
    )
    expect(error(["--target", "http://a.example", "--keys", "k.txt", "--nemesis", "db-pause"])).toContain("--nemesis")
  })

  it("lists the flags in --help", () => {
    const help = parseArguments(["--help"])
    const text = help.command === "help" ? help.text : ""
    for (const flag of ["--instances", "--nemesis", "--nemesis-every"]) expect(text).toContain(flag)
  })
})
