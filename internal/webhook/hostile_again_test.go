package webhook_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/webhook"
)

// A further hostile pass of issue 27 on the address policy: the spellings and ranges the
// earlier passes left out.

// TestTranslatedAndNonGlobalIPv6Refused: the IPv4-translated form (::ffff:0:a.b.c.d, RFC 6145,
// which a SIIT translator turns into a.b.c.d) is judged by the IPv4 address it carries, like
// the mapped and NAT64 forms; the local-use NAT64 prefix 64:ff9b:1::/48 (RFC 8215), whose
// gateway reaches its own network's loopback, private and metadata addresses, and every other
// IPv6 address outside global unicast 2000::/3 (::2, ::7f01, 5f00::1) are refused as reserved —
// no receiver has one. So is the 6to4 relay anycast 192.88.99/24 (RFC 7526).
func TestTranslatedAndNonGlobalIPv6Refused(t *testing.T) {
	ctx := context.Background()
	for _, dev := range []bool{false, true} {
		p := webhook.AddressPolicy{Dev: dev, Resolver: hostileDNS()}
		for raw, rule := range map[string]webhook.Rule{
			"https://[::ffff:0:7f00:1]:9000/":      webhook.RuleLoopback,
			"https://[::ffff:0:127.0.0.1]:9000/":   webhook.RuleLoopback,
			"https://[::ffff:0:a9fe:a9fe]:9000/":   webhook.RuleMetadata,
			"https://[::ffff:0:a00:7]:9000/":       webhook.RulePrivate,
			"https://[64:ff9b:1::7f00:1]:9000/":    webhook.RuleReserved,
			"https://[64:ff9b:1:7f00:1::]:9000/":   webhook.RuleReserved,
			"https://[64:ff9b:1::a9fe:a9fe]:9000/": webhook.RuleReserved,
			"https://[::2]:9000/":                  webhook.RuleReserved,
			"https://[::7f01]:9000/":               webhook.RuleReserved,
			"https://[::ffff:0:0:7f00:1]:9000/":    webhook.RuleReserved,
			"https://[5f00::1]:9000/":              webhook.RuleReserved,
			"https://[4000::1]:9000/":              webhook.RuleReserved,
			"https://[e000::1]:9000/":              webhook.RuleReserved,
			"https://192.88.99.1:9000/":            webhook.RuleReserved,
			"https://[2002:c058:6301::]:9000/":     webhook.RuleReserved,
		} {
			wantRefused(t, raw, p.CheckURL(ctx, raw), rule)
		}
		for a, rule := range map[string]webhook.Rule{
			"::ffff:0:7f00:1": webhook.RuleLoopback, "64:ff9b:1::7f00:1": webhook.RuleReserved, "::2": webhook.RuleReserved,
			"5f00::1": webhook.RuleReserved,
		} {
			if got := p.CheckAddr(netip.MustParseAddr(a), 9000); got != rule {
				t.Errorf("dev=%v: dial of %s: rule %q, want %q", dev, a, got, rule)
			}
		}
		// Global unicast and public IPv4 in the translated forms still pass.
		for _, raw := range []string{"https://[2606:4700::1111]/", "https://[64:ff9b::101:101]/", "https://[::ffff:0:101:101]/", "https://1.1.1.1/"} {
			if err := p.CheckURL(ctx, raw); err != nil {
				t.Errorf("dev=%v: %s refused: %v", dev, raw, err)
			}
		}
	}
}

// TestUnspecifiedNeverReachesOwnListener: a connection to 0.0.0.0 or :: is a connection to
// this machine's loopback (Linux), so an operator's CIDR that happens to hold the unspecified
// address (0.0.0.0/0, "every network") must not let a webhook reach oncepay's own listener on
// 127.0.0.1 that way: own_address is refused inside ONCEPAY_WEBHOOK_ALLOW_CIDRS, and 0.0.0.0
// is no receiver's address.
func TestUnspecifiedNeverReachesOwnListener(t *testing.T) {
	port, conns := loopbackListener(t, "127.0.0.1:0")
	own := webhook.OwnAddrs(context.Background(), nil, "127.0.0.1:"+port)
	for _, dev := range []bool{false, true} {
		p := webhook.AddressPolicy{Dev: dev, Own: own, Resolver: hostileDNS(),
			Allow: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}}
		for _, host := range []string{"0.0.0.0", "0", "[::]", "[::ffff:0.0.0.0]", "127.0.0.1", "[::ffff:7f00:1]"} {
			raw := "http://" + host + ":" + port + "/v1/orders"
			if err := p.CheckURL(context.Background(), raw); err == nil {
				t.Errorf("dev=%v: %s registered", dev, raw)
			}
			resp, err := p.Client().Post(raw, "application/json", strings.NewReader("{}"))
			if err == nil {
				resp.Body.Close()
				t.Errorf("dev=%v: %s answered %d: a webhook reached oncepay's own listener", dev, raw, resp.StatusCode)
			}
		}
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("oncepay's own listener got %d connections", n)
	}
}

// TestHugeResponseHeadersRefused: a receiver that answers with a megabyte of headers fails
// its attempt instead of having every attempt in flight to it buffer up to Go's default of
// 10 MiB (512 attempts in flight: 5 GiB); the delivery log keeps 512 bytes of an answer
// anyway.
func TestHugeResponseHeadersRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for i := range 64 {
			w.Header().Set("X-Pad-"+strconv.Itoa(i), strings.Repeat("a", 16<<10))
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	resp, err := webhook.AddressPolicy{Dev: true}.Client().Post(srv.URL, "application/json", strings.NewReader("{}"))
	if err == nil {
		resp.Body.Close()
		t.Fatalf("a megabyte of response headers was read (status %d)", resp.StatusCode)
	}
	// An ordinary answer still passes.
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Request-Id", strings.Repeat("b", 4<<10))
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(ok.Close)
	resp, err = webhook.AddressPolicy{Dev: true}.Client().Post(ok.URL, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}
