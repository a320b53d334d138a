package webhook_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/webhook"
)

// The hostile pass of issue 27 ("Done when"), on the address policy: every spelling a hostile
// admin can think of, at registration and at the dial, refused. No test here sends a packet to
// anything but loopback: a private or public address must be refused before any connection,
// and names resolve through the seam (fakeDNS), never real DNS.

// hostileDNS is the seam of these tests: names that resolve to refused addresses in every form.
func hostileDNS() *fakeDNS {
	dns := &fakeDNS{}
	dns.set("127.0.0.1.nip.io", "127.0.0.1")
	dns.set("10.0.0.7.nip.io", "10.0.0.7")
	dns.set("mapped.example", "::ffff:169.254.169.254")
	dns.set("nat64.example", "64:ff9b::7f00:1")
	dns.set("sixtofour.example", "2002:7f00:1::")
	dns.set("ula.example", "fd00::1")
	dns.set("zoned.example", "fe80::1%eth0")
	dns.set("cgnat.example", "100.64.1.1")
	dns.set("mixed.example", "192.0.2.10", "::1")
	dns.set("xn--80ak6aa92e.com", "127.0.0.1") // a punycode name that /etc/hosts maps to loopback
	dns.set("hooks.example", "192.0.2.10")     // TEST-NET-1: refused as reserved, never dialled
	return dns
}

// refusedWith400 checks that err is a 400 (invalid_request or url_refused): the URL is not
// registered.
func refusedWith400(t *testing.T, raw string, err error) {
	t.Helper()
	e, ok := apperr.As(err)
	if !ok || e.Status != http.StatusBadRequest || (e.Code != "url_refused" && e.Code != "invalid_request") {
		t.Errorf("%q: %v, want 400 url_refused or invalid_request", raw, err)
	}
}

// TestHostileSpellingsRefusedAtRegistration: outside dev, no spelling of a loopback, private,
// link-local, CGNAT, ULA, multicast or metadata address gets registered — user info, backslashes,
// percent-encoding, IDN and full-width forms, trailing dots, names that resolve there, upper
// case, every IPv6 form that carries an IPv4 address, zones, per-octet octal/hex mixes,
// whitespace, odd ports and empty hosts.
func TestHostileSpellingsRefusedAtRegistration(t *testing.T) {
	p := webhook.AddressPolicy{Resolver: hostileDNS()}
	for _, raw := range []string{
		// User info and parser differentials.
		"https://a@127.0.0.1/", "https://example.com@127.0.0.1/", "https://u:p@example.com/", "https://example.com\\@127.0.0.1/",
		"https://127.0.0.1\\.example.com/", "https://example.com\\.127.0.0.1/", "https://127.0.0.1%2f@example.com/",
		"https://127%2e0%2e0%2e1/", "https://%31%32%37.0.0.1/", "https://127.0.0.1%00.example.com/", "https://example.com#@127.0.0.1/",
		"https://example.com/#frag", "https:127.0.0.1/", "//127.0.0.1/", "https:/127.0.0.1/",
		// IDN, full-width and look-alike forms that an IDNA mapping turns into loopback.
		"https://ⓛⓞⓒⓐⓛⓗⓞⓢⓣ/", "https://１２７.０.０.１/", "https://127。0。0。1/", "https://locaⅼhost/", "https://ｌｏｃａｌｈｏｓｔ/",
		"https://xn--80ak6aa92e.com/",
		// Trailing dots, upper case.
		"https://localhost./", "https://localhost../", "https://127.0.0.1../", "https://LOCALHOST/", "HTTPS://LocalHost./",
		"https://Metadata.Google.Internal./", "https://metadata/", "https://instance-data./", "https://a.b.localhost./",
		// Names resolved through the seam.
		"https://127.0.0.1.nip.io/", "https://10.0.0.7.nip.io/", "https://mapped.example/", "https://nat64.example/",
		"https://sixtofour.example/", "https://ula.example/", "https://zoned.example/", "https://cgnat.example/", "https://mixed.example/",
		// IPv6 forms.
		"https://[0:0:0:0:0:ffff:7f00:1]/", "https://[::ffff:7f00:1]/", "https://[64:ff9b::7f00:1]/", "https://[2002:7f00:1::]/",
		"https://[2002:a9fe:a9fe::1]/", "https://[::ffff:a9fe:a9fe]/", "https://[::ffff:a00:7]/", "https://[0::1]/",
		"https://[0000:0000:0000:0000:0000:0000:0000:0001]/", "https://[::7f00:1]/", "https://[::FFFF:127.0.0.1]/",
		"https://[::1%25eth0]/", "https://[fe80::1%25]/", "https://[::ffff:127.0.0.1%25lo]/", "https://[fe80::1%251]/",
		"https://[ff02::1]/", "https://[fc00::1]/", "https://[fec0::1]/", "https://[::]/", "https://[::ffff:0.0.0.0]/",
		// inet_aton spellings, per octet and whole.
		"https://0x7f.1/", "https://0x7f.0.1/", "https://0177.1/", "https://0177.0.0x1/", "https://0x7f.0x0.0x0.0x1/",
		"https://017700000001/", "https://0x0000007f.1/", "https://00000000177.0.0.1/", "https://127.0.0.01/", "https://0X7F.1/",
		"https://127.000.000.001/", "https://0x7f000001./", "https://0xA9FEA9FE/", "https://0251.0376.0251.0376/",
		"https://169.254.43518/", "https://0xa9.0xfe.0xa9fe/", "https://10.1/", "https://167772161/", "https://0xa.0.0.7/",
		"https://100.100.25800/", "https://0x64.0x64.0x64.0xc8/", "https://4294967296/", "https://0x100000000/",
		"https://127.0.0.256/", "https://0x/", "https://0/", "https://0.0.0.0/", "https://100.64.0.1/", "https://100.127.255.255/",
		"https://224.0.0.1/", "https://239.255.255.250/", "https://255.255.255.255/", "https://192.168.0.1/", "https://172.31.255.255/",
		// Whitespace and control characters.
		" https://127.0.0.1/", "https://127.0.0.1 /", "https://127.0.0.1\n/", "https://127.0.0.1\t/", "https://\t127.0.0.1/",
		"https://127.0.0.1%20/", "https://127.0.0.1%0a/", "https://127.0.0.1\r\nHost: x/", "https:// example.com/",
		// Ports.
		"https://example.com:0/", "https://example.com:+443/", "https://example.com:/", "https://example.com:99999/",
		"https://example.com:-1/", "https://example.com:0x1bb/", "https://example.com:443 /", "https://example.com:65536/",
		// Empty and odd hosts, other schemes.
		"https:///hook", "https://:443/hook", "https://", "https://[]/", "https://%00/", "https://./", "https://../",
		"file:///etc/passwd", "gopher://127.0.0.1:6379/_INFO", "ftp://example.com/", "ws://example.com/", "http://example.com/",
		"javascript:alert(1)",
	} {
		refusedWith400(t, raw, p.CheckURL(context.Background(), raw))
	}
	for _, raw := range []string{"https://example.com:0443/", "https://EXAMPLE.com./hook"} {
		if err := p.CheckURL(context.Background(), raw); err != nil {
			t.Errorf("%q refused: %v", raw, err)
		}
	}
}

// TestHostileSpellingsInDev: dev mode lets loopback in, and still refuses oncepay's own ports
// (the simulator's pay URL) and the metadata and private addresses, in every spelling.
func TestHostileSpellingsInDev(t *testing.T) {
	ctx := context.Background()
	dns := hostileDNS()
	dns.set("sim.example", "127.0.0.1")
	dns.set("meta.example", "169.254.169.254")
	p := webhook.AddressPolicy{Dev: true, Resolver: dns, Own: webhook.OwnAddrs(ctx, nil, "127.0.0.1:18090", "http://127.0.0.1:8080")}
	for raw, rule := range map[string]webhook.Rule{
		"http://[::ffff:7f00:1]:18090/sim/trades/1/pay":   webhook.RuleOwn,
		"http://[64:ff9b::7f00:1]:18090/sim/trades/1/pay": webhook.RuleOwn,
		"http://[2002:7f00:1::]:18090/":                   webhook.RuleOwn,
		"http://[::127.0.0.1]:18090/":                     webhook.RuleOwn,
		"http://127.1:18090/":                             webhook.RuleOwn,
		"http://0x7f.1:18090/":                            webhook.RuleOwn,
		"http://0177.0.0.1:18090/":                        webhook.RuleOwn,
		"http://localhost.:18090/":                        webhook.RuleOwn,
		"http://LOCALHOST:18090/":                         webhook.RuleOwn,
		"http://api.localhost:18090/":                     webhook.RuleOwn,
		"http://sim.example:18090/":                       webhook.RuleOwn,
		"http://127.0.0.1.nip.io:8080/v1/orders":          webhook.RuleOwn,
		"http://0251.0376.0251.0376/":                     webhook.RuleMetadata,
		"http://[::ffff:a9fe:a9fe]/":                      webhook.RuleMetadata,
		"http://meta.example/":                            webhook.RuleMetadata,
		"http://mapped.example/":                          webhook.RuleMetadata,
		"http://[fe80::1%25lo]:9000/":                     webhook.RuleZoned,
		"http://zoned.example:9000/":                      webhook.RuleZoned,
		"http://10.0.0.7.nip.io/":                         webhook.RulePrivate,
		"http://0xa.0.0.7/":                               webhook.RulePrivate,
	} {
		wantRefused(t, raw, p.CheckURL(ctx, raw), rule)
	}
}

// TestMetadataRefusedInsideAllowedRanges: an operator who allows the link-local and
// unique-local ranges (receivers on a private IPv6 network) still never reaches a cloud's
// instance metadata service, IPv6 ones included, in any form.
func TestMetadataRefusedInsideAllowedRanges(t *testing.T) {
	p := webhook.AddressPolicy{Allow: []netip.Prefix{netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("fc00::/7"),
		netip.MustParsePrefix("100.64.0.0/10")}}
	for _, raw := range []string{
		"https://169.254.169.254/", "https://[fd00:ec2::254]/", "https://100.100.100.200/",
		"https://[fd20:ce::254]/",             // GCP's IPv6 metadata server
		"https://[fd00:c1::a9fe:a9fe]/",       // Oracle Cloud's IPv6 metadata service
		"https://169.254.0.23/",               // Tencent Cloud's metadata service
		"https://169.254.42.42/",              // Scaleway's metadata service
		"https://[fd00:42::42]/",              // Scaleway's IPv6 metadata service
		"https://[::ffff:169.254.42.42]/",     // and mapped
		"https://[64:ff9b::a9fe:0017]/",       // Tencent's through NAT64
		"https://[fd00:ec2:0::254]/",          // another spelling of AWS's
		"https://[FD20:CE:0:0:0:0:0:254]/",    // another spelling of GCP's
		"https://[fd00:c1::169.254.169.254]/", // another spelling of Oracle's
	} {
		wantRefused(t, raw, p.CheckURL(context.Background(), raw), webhook.RuleMetadata)
	}
}

// loopbackListener accepts on 127.0.0.1 (or addr) and counts connections, answering every
// request 200; it is what a refused dial must never reach.
func loopbackListener(t *testing.T, addr string) (port string, conns *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conns = new(atomic.Int32)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	_, port, _ = net.SplitHostPort(ln.Addr().String())
	return port, conns
}

// TestHostileSpellingsRefusedAtTheDial: a URL stored behind the registration's back (an old
// row, a restored dump) in any spelling never reaches loopback: the transport's own reading
// of the host — IDNA mapping of full-width and circled forms included — is what the dialer
// checks, so no parser differential gets a connection through.
func TestHostileSpellingsRefusedAtTheDial(t *testing.T) {
	port, conns := loopbackListener(t, "127.0.0.1:0")
	client := webhook.AddressPolicy{Resolver: hostileDNS()}.Client()
	for _, host := range []string{
		"127.0.0.1", "127.1", "0x7f.1", "0177.0.0.1", "2130706433", "localhost", "localhost.", "LOCALHOST", "a.localhost",
		"ⓛⓞⓒⓐⓛⓗⓞⓢⓣ", "１２７.０.０.１", "127。0。0。1", "ｌｏｃａｌｈｏｓｔ", "[::ffff:7f00:1]", "[::ffff:127.0.0.1]", "[::1]",
		"[0:0:0:0:0:ffff:7f00:1]", "[::127.0.0.1]", "127.0.0.1.nip.io", "xn--80ak6aa92e.com", "mixed.example", "0",
	} {
		raw := "http://" + host + ":" + port + "/hook"
		resp, err := client.Post(raw, "application/json", strings.NewReader("{}"))
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s: answered %d, want a refused dial", raw, resp.StatusCode)
			continue
		}
		var r *webhook.Refusal
		if !errors.As(err, &r) {
			t.Errorf("%s: %v, want a refusal by the address policy", raw, err)
		}
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("the loopback listener got %d connections, want 0", n)
	}
}

// TestProxyFromTheEnvironmentIgnored: HTTP_PROXY, HTTPS_PROXY and ALL_PROXY pointing at a
// listener on loopback are never used — a proxy would connect on oncepay's behalf, past the
// dialer's check. The target resolves to a refused address, so nothing is dialled at all.
func TestProxyFromTheEnvironmentIgnored(t *testing.T) {
	port, conns := loopbackListener(t, "127.0.0.1:0")
	proxy := "http://127.0.0.1:" + port
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"} {
		t.Setenv(k, proxy)
	}
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")
	client := webhook.AddressPolicy{Dev: true, Resolver: hostileDNS()}.Client()
	if tr, ok := client.Transport.(*http.Transport); !ok || tr.Proxy != nil {
		t.Fatalf("the webhook transport has a proxy function (%T)", client.Transport)
	}
	for _, raw := range []string{"http://hooks.example/hook", "https://hooks.example/hook"} {
		resp, err := client.Post(raw, "application/json", strings.NewReader("{}"))
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s: answered %d through something", raw, resp.StatusCode)
			continue
		}
		var r *webhook.Refusal
		if !errors.As(err, &r) || r.Rule != webhook.RuleReserved {
			t.Errorf("%s: %v, want the reserved address refused", raw, err)
		}
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("the proxy on loopback got %d connections: the environment's proxy was used", n)
	}
}

// flipDNS answers allowed and refused in turn for every name: a rebinding resolver with a
// zero TTL.
type flipDNS struct {
	mu               sync.Mutex
	n                int
	allowed, refused netip.Addr
}

func (d *flipDNS) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n++
	if d.n%2 == 1 {
		return []netip.Addr{d.allowed}, nil
	}
	return []netip.Addr{d.refused}, nil
}

// TestRebindingWithinOneDialNeverConnects: a resolver that answers an allowed address and a
// refused one in turn (127.0.0.2, allowed by the operator's CIDR, then 127.0.0.1) never gets a
// connection to the refused one: each connection dials the very address it checked, resolved
// once.
func TestRebindingWithinOneDialNeverConnects(t *testing.T) {
	port, refusedConns := loopbackListener(t, "127.0.0.1:0")
	_, allowedConns := loopbackListener(t, "127.0.0.2:"+port)
	dns := &flipDNS{allowed: netip.MustParseAddr("127.0.0.2"), refused: netip.MustParseAddr("127.0.0.1")}
	p := webhook.AddressPolicy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}, Resolver: dns}
	client := p.Client()
	client.Transport.(*http.Transport).DisableKeepAlives = true
	ok, refused := 0, 0
	for range 20 {
		resp, err := client.Post("http://rebind.example:"+port+"/hook", "application/json", strings.NewReader("{}"))
		var r *webhook.Refusal
		switch {
		case err == nil:
			resp.Body.Close()
			ok++
		case errors.As(err, &r) && r.Rule == webhook.RuleLoopback:
			refused++
		default:
			t.Errorf("attempt: %v", err)
		}
	}
	if n := refusedConns.Load(); n != 0 {
		t.Errorf("127.0.0.1 got %d connections while the resolver rebinds", n)
	}
	if ok == 0 || refused == 0 || allowedConns.Load() == 0 {
		t.Errorf("%d answered, %d refused, %d connections to the allowed address: the seam did not alternate", ok, refused, allowedConns.Load())
	}
}

// TestDevAllowsOnlyRealLoopback: dev mode allows loopback — an address this machine answers
// on itself (127/8, ::1, and ::ffff:127.x, which Go dials as IPv4) — and not an IPv6 address
// that merely carries 127.x: a NAT64 (64:ff9b::7f00:1), 6to4 (2002:7f00:1::) or
// IPv4-compatible (::127.0.0.1) address leaves the machine, and behind a NAT64 gateway
// reaches the gateway's own loopback. Checked without a packet: at registration and by the
// policy's verdict on the address the dialer would dial.
func TestDevAllowsOnlyRealLoopback(t *testing.T) {
	ctx := context.Background()
	dns := &fakeDNS{}
	dns.set("nat64.example", "64:ff9b::7f00:1")
	p := webhook.AddressPolicy{Dev: true, Resolver: dns}
	for _, raw := range []string{"http://[64:ff9b::7f00:1]:9000/", "http://[2002:7f00:1::]:9000/", "http://[::127.0.0.1]:9000/",
		"http://[::7f00:1]:9000/", "http://nat64.example:9000/"} {
		wantRefused(t, raw, p.CheckURL(ctx, raw), webhook.RuleLoopback)
	}
	for _, a := range []string{"64:ff9b::7f00:1", "2002:7f00:1::", "::127.0.0.1"} {
		if rule := p.CheckAddr(netip.MustParseAddr(a), 9000); rule != webhook.RuleLoopback {
			t.Errorf("dial of %s: rule %q, want loopback", a, rule)
		}
	}
	for _, raw := range []string{"http://127.0.0.1:9000/", "http://127.0.0.2:9000/", "http://[::1]:9000/", "http://[::ffff:127.0.0.1]:9000/", "http://localhost:9000/"} {
		if err := p.CheckURL(ctx, raw); err != nil {
			t.Errorf("dev refused %s: %v", raw, err)
		}
	}
}
