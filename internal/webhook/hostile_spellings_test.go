package webhook_test

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/webhook"
)

// A fresh hostile pass of the address policy: every refused IPv4 target in every spelling and
// IPv6 embedding, every refused IPv6 target in every IPv6 spelling, the same through the
// resolver seam, at registration and at the dial, in and out of dev mode, and under an
// operator's allow list that opens IPv6 only.

// v4Spellings are the spellings of an IPv4 address a: as a URL host (brackets included).
func v4Spellings(a netip.Addr) []string {
	b := a.As4()
	u := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	hex4 := fmt.Sprintf("%02x%02x:%02x%02x", b[0], b[1], b[2], b[3])
	return []string{
		a.String(), a.String() + ".", strings.ToUpper(a.String()),
		fmt.Sprint(u), fmt.Sprintf("0x%08x", u), fmt.Sprintf("0X%X", u), fmt.Sprintf("0%o", u), fmt.Sprint(u) + ".",
		fmt.Sprintf("0%o.0%o.0%o.0%o", b[0], b[1], b[2], b[3]), fmt.Sprintf("0x%x.0x%x.0x%x.0x%x", b[0], b[1], b[2], b[3]),
		fmt.Sprintf("0x%x.%d.0%o.%d", b[0], b[1], b[2], b[3]), fmt.Sprintf("%d.%d.%d", b[0], b[1], uint32(b[2])<<8|uint32(b[3])),
		fmt.Sprintf("%d.%d", b[0], uint32(b[1])<<16|uint32(b[2])<<8|uint32(b[3])), fmt.Sprintf("0x%x.0x%x", b[0], uint32(b[1])<<16|uint32(b[2])<<8|uint32(b[3])),
		fmt.Sprintf("000%o.%d.%d.%d", b[0], b[1], b[2], b[3]), fmt.Sprintf("0x00000%x.%d.%d.%d", b[0], b[1], b[2], b[3]),
		"[::ffff:" + a.String() + "]", "[::ffff:" + hex4 + "]", "[0:0:0:0:0:ffff:" + hex4 + "]", "[::FFFF:" + a.String() + "]",
		"[::" + a.String() + "]", "[::" + hex4 + "]", "[::ffff:0:" + a.String() + "]", "[::ffff:0:" + hex4 + "]",
		"[64:ff9b::" + a.String() + "]", "[64:ff9b::" + hex4 + "]", "[64:ff9b:1::" + hex4 + "]",
		"[2002:" + hex4 + "::]", "[2002:" + hex4 + "::1]", "[2002:" + hex4 + ":ffff::]",
	}
}

// refusedV4 are IPv4 targets no webhook may reach outside an allow list.
var refusedV4 = []string{
	"127.0.0.1", "127.255.255.254", "10.0.0.7", "172.16.0.1", "172.31.255.254", "192.168.1.1", "100.64.0.1",
	"100.127.255.254", "169.254.169.254", "169.254.1.1", "169.254.170.2", "100.100.100.200", "224.0.0.1",
	"239.255.255.250", "255.255.255.255", "0.0.0.0", "0.1.2.3", "240.0.0.1", "192.0.0.192",
}

// refusedV6 are IPv6 hosts (bracketed) no webhook may reach outside an allow list.
var refusedV6 = []string{
	"[::1]", "[0:0:0:0:0:0:0:1]", "[0000:0000:0000:0000:0000:0000:0000:0001]", "[::0:1]", "[fe80::1]", "[FE80::1]",
	"[febf:ffff::1]", "[fd00::1]", "[fc00::1]", "[FDFF:ffff::1]", "[fec0::1]", "[ff02::1]", "[ff05::1:3]", "[fd00:ec2::254]",
	"[fd00:EC2:0::254]", "[fd20:ce::254]", "[fd00:c1::a9fe:a9fe]", "[::]", "[0::]", "[2001::1]", "[2001:0:4136:e378:8000:63bf:3fff:fdd2]",
	"[2001:db8::1]", "[100::1]", "[::1%25lo]", "[fe80::1%25eth0]", "[2606:4700::1%25eth0]",
}

// TestEverySpellingOfEveryRefusedTarget: no spelling of a refused target registers, in or out
// of dev (dev lets only real loopback in), and no name resolving to one does.
func TestEverySpellingOfEveryRefusedTarget(t *testing.T) {
	ctx := context.Background()
	dns := &fakeDNS{}
	for _, dev := range []bool{false, true} {
		p := webhook.AddressPolicy{Dev: dev, Resolver: dns}
		try := func(host string, devLoopback bool) {
			t.Helper()
			raw := "https://" + host + ":9443/services/T000/B000/X"
			if dev && devLoopback {
				return
			}
			if err := p.CheckURL(ctx, raw); err == nil {
				t.Errorf("dev=%v: %s registered", dev, raw)
			}
		}
		for _, target := range refusedV4 {
			a := netip.MustParseAddr(target)
			for i, host := range v4Spellings(a) {
				// Dev allows what this machine answers on itself: 127/8 in its IPv4 spellings
				// (the first sixteen) and IPv4-mapped.
				ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
				try(host, a.IsLoopback() && (i < 16 || (err == nil && ip.Is4In6())))
			}
			// The same through DNS: every embedding the resolver may hand back.
			for _, host := range v4Spellings(a) {
				if !strings.HasPrefix(host, "[") {
					continue
				}
				ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
				if err != nil {
					t.Fatal(err)
				}
				name := "r" + strings.NewReplacer(":", "-", ".", "-", "[", "", "]", "").Replace(strings.ToLower(host)) + ".example"
				dns.set(name, "93.184.216.34", ip.String())
				try(name, ip.Unmap().IsLoopback())
			}
		}
		for _, host := range refusedV6 {
			try(host, strings.Trim(host, "[]") != "::" && netip.MustParseAddr(strings.Trim(strings.Split(host, "%")[0], "[]")).IsLoopback() && !strings.Contains(host, "%"))
		}
	}
}

// TestEverySpellingRefusedAtTheDial: a stored URL in any spelling of loopback never gets a
// connection outside dev, and in dev never reaches an own port.
func TestEverySpellingRefusedAtTheDial(t *testing.T) {
	port, conns := loopbackListener(t, "127.0.0.1:0")
	ctx := context.Background()
	hosts := append(v4Spellings(netip.MustParseAddr("127.0.0.1")), "localhost", "LOCALHOST.", "x.localhost")
	plain := webhook.AddressPolicy{}.Client()
	own := webhook.AddressPolicy{Dev: true, Own: webhook.OwnAddrs(ctx, nil, ":"+port)}.Client()
	for _, host := range hosts {
		raw := "http://" + host + ":" + port + "/hook"
		for _, client := range []struct {
			name string
			do   func() error
		}{
			{"public only", func() error { return post(plain, raw) }},
			{"dev, own port", func() error { return post(own, raw) }},
		} {
			if err := client.do(); err == nil {
				t.Errorf("%s: %s answered", client.name, raw)
			}
		}
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("the loopback listener got %d connections, want 0", n)
	}
}

// post POSTs an empty object to raw; an answer of any status is nil.
func post(c *http.Client, raw string) error {
	resp, err := c.Post(raw, "application/json", strings.NewReader("{}"))
	if err == nil {
		resp.Body.Close()
	}
	return err
}

// TestIPv6AllowListOpensNoIPv4: an operator's allow list that opens IPv6 only (::/0, or
// 2000::/3 for "any IPv6 receiver") judges an address that carries an IPv4 address by that
// IPv4 address, as every other rule does: ::ffff:127.0.0.1 is dialled as 127.0.0.1, and
// ::ffff:10.0.0.7, 64:ff9b::a00:7 and 2002:a00:7:: reach 10.0.0.7 — which the list never
// allowed.
func TestIPv6AllowListOpensNoIPv4(t *testing.T) {
	ctx := context.Background()
	for _, allow := range []string{"::/0", "2000::/3", "::ffff:0:0/96", "64:ff9b::/96"} {
		p := webhook.AddressPolicy{Allow: []netip.Prefix{netip.MustParsePrefix(allow)}, Resolver: &fakeDNS{}}
		for _, host := range []string{
			"[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::ffff:10.0.0.7]", "[::ffff:100.64.0.1]", "[::ffff:172.16.0.1]",
			"[64:ff9b::7f00:1]", "[64:ff9b::a00:7]", "[2002:a00:7::]", "[2002:7f00:1::]", "[::ffff:0:a00:7]", "[::10.0.0.7]",
		} {
			raw := "https://" + host + "/hook"
			if err := p.CheckURL(ctx, raw); err == nil {
				t.Errorf("allow %s: %s registered", allow, raw)
			}
			a := netip.MustParseAddr(strings.Trim(host, "[]"))
			if rule := p.CheckAddr(a, 443); rule == "" {
				t.Errorf("allow %s: the dial of %s allowed", allow, a)
			}
		}
		// What the list opens is open: a ULA or a global address inside it.
		if allow == "::/0" {
			for _, raw := range []string{"https://[fd12:3456::1]/", "https://[2606:4700::1111]/"} {
				if err := p.CheckURL(ctx, raw); err != nil {
					t.Errorf("allow %s: %s refused: %v", allow, raw, err)
				}
			}
		}
	}
	// An IPv4 CIDR still opens its addresses in every embedding of them.
	p := webhook.AddressPolicy{Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	for _, raw := range []string{"https://10.0.0.7/", "https://[::ffff:10.0.0.7]/", "https://[64:ff9b::a00:7]/"} {
		if err := p.CheckURL(ctx, raw); err != nil {
			t.Errorf("allow 10/8: %s refused: %v", raw, err)
		}
	}
}
