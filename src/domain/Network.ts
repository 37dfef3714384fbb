/**
 * Address classification for webhook targets: loopback, private, link-local, unique-local and
 * other non-public ranges are refused unless explicitly allowed (SSRF protection).
 */
const ipv4ToNumber = (ip: string): number | null => {
  const parts = ip.split(".")
  if (parts.length !== 4) return null
  let value = 0
  for (const part of parts) {
    if (!/^\d{1,3}$/.test(part) || Number(part) > 255) return null
    value = value * 256 + Number(part)
  }
  return value
}

const ipv4Blocks: ReadonlyArray<readonly [string, number]> = [
  ["0.0.0.0", 8], ["10.0.0.0", 8], ["100.64.0.0", 10], ["127.0.0.0", 8], ["169.254.0.0", 16],
  ["172.16.0.0", 12], ["192.0.0.0", 24], ["192.0.2.0", 24], ["192.168.0.0", 16], ["198.18.0.0", 15],
  ["198.51.100.0", 24], ["203.0.113.0", 24], ["224.0.0.0", 4], ["240.0.0.0", 4]
]

export const isPublicIpv4 = (ip: string): boolean => {
  const value = ipv4ToNumber(ip)
  if (value === null) return false
  return !ipv4Blocks.some(([base, bits]) => {
    const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0
    return ((value & mask) >>> 0) === ((ipv4ToNumber(base)! & mask) >>> 0)
  })
}

export const isPublicIpv6 = (ip: string): boolean => {
  const lower = ip.toLowerCase().replace(/^\[|\]$/g, "")
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(lower)
  if (mapped !== null) return isPublicIpv4(mapped[1]!)
  if (lower === "::" || lower === "::1") return false
  const first = parseInt(lower.split(":")[0] || "0", 16)
  if ((first & 0xfe00) === 0xfc00) return false // fc00::/7 unique-local
  if ((first & 0xffc0) === 0xfe80) return false // fe80::/10 link-local
  if ((first & 0xff00) === 0xff00) return false // multicast
  if (lower.startsWith("2001:db8")) return false // documentation
  return true
}

export const isPublicAddress = (ip: string): boolean => (ip.includes(":") ? isPublicIpv6(ip) : isPublicIpv4(ip))
