import ipaddr from "ipaddr.js"
import { isIP } from "node:net"

/**
 * Address classification for webhook targets (SSRF protection): only globally routable unicast
 * addresses are public. Classification is ipaddr.js's (its range tables follow the IANA special-
 * purpose registries); we add the unwrapping of every IPv6 form that carries an IPv4 address
 * (mapped, compatible, NAT64 64:ff9b::/96 and 64:ff9b:1::/48, SIIT, 6to4, Teredo), so that a
 * private IPv4 address cannot hide inside an IPv6 spelling.
 *
 * Input is an address as a URL parser or a resolver gives it: WHATWG URL parsing has already
 * turned decimal, octal, hex and short IPv4 spellings into dotted quads.
 */

const embeddedIpv4 = (address: ipaddr.IPv6): ipaddr.IPv4 | null => {
  const range = address.range()
  const parts = address.parts
  const low32 = (high: number, low: number) => new ipaddr.IPv4([high >> 8, high & 0xff, low >> 8, low & 0xff])
  if (range === "ipv4Mapped" || range === "rfc6145") return low32(parts[6]!, parts[7]!)
  // IPv4-compatible (::a.b.c.d, deprecated; :: and ::1 land in 0.0.0.0/8, not public).
  if (parts.slice(0, 6).every((part) => part === 0)) return low32(parts[6]!, parts[7]!)
  // NAT64: the well-known prefix 64:ff9b::/96 and the local-use 64:ff9b:1::/48, one check.
  if (parts[0] === 0x64 && parts[1] === 0xff9b) return low32(parts[6]!, parts[7]!)
  if (range === "6to4") return low32(parts[1]!, parts[2]!)
  // Teredo: the client's address is the last 32 bits, inverted.
  if (range === "teredo") return low32(parts[6]! ^ 0xffff, parts[7]! ^ 0xffff)
  return null
}

const isPublicParsed = (address: ipaddr.IPv4 | ipaddr.IPv6): boolean => {
  if (address.kind() === "ipv4") return address.range() === "unicast"
  const inner = embeddedIpv4(address as ipaddr.IPv6)
  if (inner !== null) return inner.range() === "unicast"
  return address.range() === "unicast"
}

/** Whether `text` (an IPv4 or IPv6 address, brackets and zone allowed) is a public unicast address. Anything unparsable is not. */
export const isPublicAddress = (text: string): boolean => {
  const bare = text.replace(/^\[|\]$/g, "").replace(/%.*$/, "")
  if (!ipaddr.isValid(bare)) return false
  // Only canonical dotted quads for IPv4: other spellings are what the URL parser would normalise, refuse them raw.
  if (!bare.includes(":") && !ipaddr.IPv4.isValidFourPartDecimal(bare)) return false
  return isPublicParsed(ipaddr.parse(bare))
}

/** Names that always mean this machine (RFC 6761 section 6.3), whatever a resolver says. */
const isLocalhostName = (host: string) => {
  const name = host.toLowerCase().replace(/\.$/, "")
  return name === "localhost" || name.endsWith(".localhost") || name === "localhost.localdomain"
}

/**
 * What is wrong with a merchant's webhook URL, in the merchant's words; null when nothing. It
 * must be absolute http(s), without credentials, and (unless private URLs are allowed) its host
 * must not be a loopback, private or link-local address literal nor a localhost name. Nothing is
 * resolved here: a name that does not resolve yet (offline, or a host set up later) is accepted,
 * because the addresses a name resolves to are checked where they matter, on every connection
 * (src/platform/WebhookTransport.ts), since DNS can change.
 */
export const webhookUrlProblem = (text: string, allowPrivate: boolean): string | null => {
  let url: URL
  try {
    url = new URL(text)
  } catch {
    return "webhook_url must be an absolute http or https URL."
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return "webhook_url must be an absolute http or https URL."
  if (url.username !== "" || url.password !== "") return "webhook_url must not carry credentials."
  if (allowPrivate) return null
  // WHATWG URL parsing has already turned every IPv4 spelling (decimal, octal, hex, short) into a dotted quad.
  const host = url.hostname.replace(/^\[|\]$/g, "")
  const literal = isIP(host) !== 0
  if (isLocalhostName(host) || (literal && !isPublicAddress(host))) {
    return `webhook_url host '${host}' is a loopback, private or link-local address; set WEBHOOK_ALLOW_PRIVATE_URLS=true to allow it.`
  }
  return null
}
