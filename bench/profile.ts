/**
 * Summarises a V8 CPU profile (`npm run bench -- --profile DIR`): self time by function and by
 * package, the top of each.   node --import tsx bench/profile.ts FILE.cpuprofile [--top 30]
 */
import { readFileSync } from "node:fs"

interface Node {
  readonly id: number
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number }
  readonly hitCount: number
}
const file = process.argv[2]!
const topIndex = process.argv.indexOf("--top")
const top = topIndex === -1 ? 30 : Number(process.argv[topIndex + 1])
const profile = JSON.parse(readFileSync(file, "utf8")) as {
  nodes: Array<Node>
  samples: Array<number>
  timeDeltas: Array<number>
}
const selfMs = new Map<number, number>()
profile.samples.forEach((id, i) => selfMs.set(id, (selfMs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0) / 1000))
const byFunction = new Map<string, number>()
const byPackage = new Map<string, number>()
let total = 0
for (const node of profile.nodes) {
  const ms = selfMs.get(node.id) ?? 0
  total += ms
  const url = node.callFrame.url
  const where = url.includes("node_modules/")
    ? url.slice(url.lastIndexOf("node_modules/") + 13).split("/").slice(0, url.includes("node_modules/@") ? 2 : 1).join(
      "/"
    )
    : url.startsWith("node:")
    ? url
    : url === ""
    ? `(${node.callFrame.functionName || "native"})`
    : url.replace(/^.*\/(src|sim|bench)\//, "$1/")
  const name = `${node.callFrame.functionName || "(anonymous)"} ${where}:${node.callFrame.lineNumber + 1}`
  byFunction.set(name, (byFunction.get(name) ?? 0) + ms)
  byPackage.set(where, (byPackage.get(where) ?? 0) + ms)
}
const print = (title: string, map: Map<string, number>) => {
  console.log(`\n${title}`)
  for (const [name, ms] of [...map].sort((a, b) => b[1] - a[1]).slice(0, top)) {
    console.log(`${((ms / total) * 100).toFixed(1).padStart(5)}%  ${ms.toFixed(0).padStart(7)} ms  ${name}`)
  }
}
console.log(`total ${total.toFixed(0)} ms`)
print("by package or file (self time)", byPackage)
print("by function (self time)", byFunction)
