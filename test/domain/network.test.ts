import { describe, expect, it } from "vitest"
import { isPublicAddress } from "../../src/domain/Network.ts"

// SSRF: only global unicast is public, whatever IPv6 form an IPv4 address hides in.

describe("isPublicAddress", () => {
  it.each([
    "127.0.0.1",
    "10.0.0.1",
    "172.16.5.4",
    "192.168.1.1",
    "169.254.169.254",
    "100.64.0.1",
    "0.0.0.0",
    "255.255.255.255",
    "224.0.0.1",
    "192.0.2.1",
    "198.18.0.1",
    "::",
    "::1",
    "fe80::1",
    "fe80::1%eth0",
    "fc00::1",
    "fd12::1",
    "ff02::1",
    "2001:db8::1",
    "::ffff:127.0.0.1",
    "::ffff:7f00:1",
    "::ffff:a9fe:a9fe",
    "[::ffff:127.0.0.1]",
    "::127.0.0.1",
    "::7f00:1",
    "::ffff:0:7f00:1",
    "64:ff9b::7f00:1",
    "64:ff9b::a9fe:a9fe",
    "64:ff9b:1::a00:1",
    "2002:7f00:1::",
    "2002:a9fe:a9fe::1",
    "2002:c0a8:101::1",
    "2001:0:4136:e378:8000:63bf:80ff:fffe",
    "0177.0.0.1",
    "2130706433",
    "0x7f.0.0.1",
    "127.1",
    "not an address",
    ""
  ])("%s is not public", (address) => {
    expect(isPublicAddress(address)).toBe(false)
  })

  it.each([
    "8.8.8.8",
    "1.1.1.1",
    "93.184.215.14",
    "2606:4700:4700::1111",
    "::ffff:8.8.8.8",
    "64:ff9b::808:808",
    "2002:808:808::1"
  ])(
    "%s is public",
    (address) => {
      expect(isPublicAddress(address)).toBe(true)
    }
  )
})
