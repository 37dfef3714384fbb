import ts from "typescript"; import fs from "node:fs"; import path from "node:path"
const roots = process.argv.slice(2); const out = []
const walk = (d) => { for (const e of fs.readdirSync(d, { withFileTypes: true })) { const p = path.join(d, e.name); if (e.isDirectory()) { if (e.name !== "node_modules") walk(p) } else if (p.endsWith(".ts")) check(p) } }
const check = (f) => { const src = ts.createSourceFile(f, fs.readFileSync(f, "utf8"), ts.ScriptTarget.Latest, true)
  const line = (p) => src.getLineAndCharacterOfPosition(p).line
  const nestedLines = (n) => { let s = 0; const v = (c) => { if (ts.isFunctionLike(c) && c.body) { s += line(c.end) - line(c.getStart()) + 1 } else ts.forEachChild(c, v) }; ts.forEachChild(n.body, v); return s }
  const visit = (n) => { if (ts.isFunctionLike(n) && n.body) { const total = line(n.end) - line(n.getStart()) + 1; const own = total - nestedLines(n); if (own > 100) { let name = n.name?.getText?.() ?? (n.parent && ts.isVariableDeclaration(n.parent) ? n.parent.name.getText() : n.parent && ts.isPropertyAssignment(n.parent) ? n.parent.name.getText() : "(anon)"); out.push([own, total, f + ":" + (line(n.getStart()) + 1), name]) } } ts.forEachChild(n, visit) }
  visit(src) }
roots.forEach(walk); out.sort((x, y) => y[0] - x[0]); for (const o of out) console.log(o.join(" "))
