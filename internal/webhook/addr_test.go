package webhook_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/webhook"
)

// fakeDNS is the resolver seam: each name answers what the map says now.
type fakeDNS struct {
	mu    sync.Mutex
	names map[string][]netip.Addr
}

func (d *fakeDNS) set(name string, addrs ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.names == nil {
		d.names = map[string][]netip.Addr{}
	}
	d.names[name] = nil
	for _, a := range addrs {
		d.names[name] = append(d.names[name], netip.MustParseAddr(a))
	}
}

func (d *fakeDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if a, ok := d.names[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// wantRefused checks that err is the 400 url_refused naming rule.
func wantRefused(t *testing.T, raw string, err error, rule webhook.Rule) {
	t.Helper()
	e, ok := apperr.As(err)
	switch {
	case !ok:
		t.Errorf("%s: %v, want 400 url_refused (rule %s)", raw, err, rule)
	case e.Status != http.StatusBadRequest || e.Code != "url_refused" || !strings.Contains(e.Detail, "rule "+string(rule)):
		t.Errorf("%s: %d %s %q, want 400 url_refused naming rule %s", raw, e.Status, e.Code, e.Detail, rule)
	}
}

// TestCheckURLRefusesEverySpelling: every spelling of a refused address, and every name that
// resolves to one, is refused at registration with the rule that refuses it (issue 27).
func TestCheckURLRefusesEverySpelling(t *testing.T) {
	dns := &fakeDNS{}
	dns.set("intranet.example", "10.1.1.1")
	dns.set("sneaky.example", "93.184.216.34", "127.0.0.1")
	dns.set("v6-mapped.example", "::ffff:169.254.169.254")
	dns.set("hooks.example", "93.184.216.34")
	p := webhook.AddressPolicy{Resolver: dns}
	for raw, rule := range map[string]webhook.Rule{
		"https://10.0.0.7/hook":              webhook.RulePrivate,
		"https://172.16.5.4":                 webhook.RulePrivate,
		"https://192.168.1.20":               webhook.RulePrivate,
		"https://[fd00::1]":                  webhook.RuleUniqueLocal,
		"https://127.0.0.1":                  webhook.RuleLoopback,
		"https://127.1":                      webhook.RuleLoopback,
		"https://127.0.1":                    webhook.RuleLoopback,
		"https://2130706433":                 webhook.RuleLoopback,
		"https://0x7f000001":                 webhook.RuleLoopback,
		"https://0X7F000001":                 webhook.RuleLoopback,
		"https://0177.0.0.1":                 webhook.RuleLoopback,
		"https://0x7f.1":                     webhook.RuleLoopback,
		"https://127.0.0.1.":                 webhook.RuleLoopback,
		"https://[::1]":                      webhook.RuleLoopback,
		"https://[::ffff:127.0.0.1]":         webhook.RuleLoopback,
		"https://[::ffff:7f00:1]":            webhook.RuleLoopback,
		"https://[::127.0.0.1]":              webhook.RuleLoopback,
		"https://[0:0:0:0:0:ffff:127.0.0.1]": webhook.RuleLoopback,
		"https://localhost:8443":             webhook.RuleLoopback,
		"https://LOCALHOST.":                 webhook.RuleLoopback,
		"https://api.localhost":              webhook.RuleLoopback,
		"https://[::1%25lo]":                 webhook.RuleZoned,
		"https://[::ffff:127.0.0.1%25lo]":    webhook.RuleZoned,
		"https://[fe80::1%25eth0]":           webhook.RuleZoned,
		"https://[::ffff:10.0.0.1]":          webhook.RulePrivate,
		"https://169.254.169.254/latest":     webhook.RuleMetadata,
		"https://0xa9fea9fe":                 webhook.RuleMetadata,
		"https://2852039166":                 webhook.RuleMetadata,
		"https://[::ffff:169.254.169.254]":   webhook.RuleMetadata,
		"https://[64:ff9b::a9fe:a9fe]":       webhook.RuleMetadata,
		"https://100.100.100.200":            webhook.RuleMetadata,
		"https://[fd00:ec2::254]":            webhook.RuleMetadata,
		"https://metadata.google.internal":   webhook.RuleMetadata,
		"https://100.64.0.1":                 webhook.RuleCGNAT,
		"https://169.254.1.1":                webhook.RuleLinkLocal,
		"https://[fe80::1]":                  webhook.RuleLinkLocal,
		"https://224.0.0.1":                  webhook.RuleMulticast,
		"https://[ff02::1]":                  webhook.RuleMulticast,
		"https://255.255.255.255":            webhook.RuleBroadcast,
		"https://0.0.0.0":                    webhook.RuleUnspecified,
		"https://0":                          webhook.RuleUnspecified,
		"https://[::]":                       webhook.RuleUnspecified,
		"https://240.0.0.1":                  webhook.RuleReserved,
		"https://256.1.1.1":                  webhook.RuleInvalid,
		"https://1.2.3.4.5":                  webhook.RuleInvalid,
		"https://08.1.1.1":                   webhook.RuleInvalid,
		"https://intranet.example/hook":      webhook.RulePrivate,
		"https://sneaky.example/hook":        webhook.RuleLoopback,
		"https://v6-mapped.example/hook":     webhook.RuleMetadata,
	} {
		wantRefused(t, raw, p.CheckURL(context.Background(), raw), rule)
	}
	for _, raw := range []string{"https://example.com:99999/hook", "https://example.com:0/hook", "https://example.com:/hook", "https://example.com:+443/hook"} {
		if e, ok := apperr.As(p.CheckURL(context.Background(), raw)); !ok || e.Status != http.StatusBadRequest {
			t.Errorf("%s: want a 400, got %v", raw, e)
		}
	}
	for _, raw := range []string{"https://93.184.216.34/hook", "https://hooks.example:8443/hook", "https://[2606:4700::1111]/hook",
		"https://not-resolving.example/hook"} {
		if err := p.CheckURL(context.Background(), raw); err != nil {
			t.Errorf("%s refused: %v", raw, err)
		}
	}
}

// TestAllowCIDRsAndDev: an operator's CIDR lets a private receiver in, never a metadata
// address; dev lets loopback in, never oncepay's own addresses nor a private network.
func TestAllowCIDRsAndDev(t *testing.T) {
	ctx := context.Background()
	p := webhook.AddressPolicy{Allow: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16"), netip.MustParsePrefix("169.254.0.0/16")}}
	if err := p.CheckURL(ctx, "https://10.20.1.1/hook"); err != nil {
		t.Errorf("allowed CIDR refused: %v", err)
	}
	wantRefused(t, "10.21.0.1", p.CheckURL(ctx, "https://10.21.0.1/hook"), webhook.RulePrivate)
	wantRefused(t, "169.254.169.254", p.CheckURL(ctx, "https://169.254.169.254/"), webhook.RuleMetadata)

	own := webhook.OwnAddrs(ctx, nil, "127.0.0.1:8080", "127.0.0.1:18090", ":9090", "http://localhost:7070")
	dev := webhook.AddressPolicy{Dev: true, Own: own}
	for _, raw := range []string{"http://127.0.0.1:9000/hook", "http://localhost:9000/hook", "http://[::1]:9000/"} {
		if err := dev.CheckURL(ctx, raw); err != nil {
			t.Errorf("dev refused %s: %v", raw, err)
		}
	}
	for raw, rule := range map[string]webhook.Rule{
		"http://127.0.0.1:18090/sim/pay":   webhook.RuleOwn,
		"http://localhost:8080/v1/orders":  webhook.RuleOwn,
		"http://2130706433:18090/":         webhook.RuleOwn,
		"http://127.0.0.1:9090/":           webhook.RuleOwn,
		"http://[::1]:9090/":               webhook.RuleOwn,
		"http://127.0.0.1:7070/":           webhook.RuleOwn,
		"http://169.254.169.254/latest":    webhook.RuleMetadata,
		"http://10.0.0.1/hook":             webhook.RulePrivate,
		"http://[::ffff:127.0.0.1]:18090/": webhook.RuleOwn,
	} {
		wantRefused(t, raw, dev.CheckURL(ctx, raw), rule)
	}
}

// TestDialRefusesWhatResolvesToLoopbackAtSendTime: a name that resolved to a public address
// when it was registered and resolves to 127.0.0.1 when the attempt is sent (DNS rebinding) is
// refused by the dialer: the receiver on loopback never sees a connection, and the delivery
// log names the rule.
func TestDialRefusesWhatResolvesToLoopbackAtSendTime(t *testing.T) {
	var conns atomic.Int32
	inner := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	inner.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	inner.StartTLS()
	t.Cleanup(inner.Close)
	port := inner.Listener.Addr().(*net.TCPAddr).Port

	dns := &fakeDNS{}
	dns.set("rebind.example", "93.184.216.34")
	policy := webhook.AddressPolicy{Resolver: dns}
	raw := "https://rebind.example:" + strconv.Itoa(port) + "/hook"
	if err := policy.CheckURL(context.Background(), raw); err != nil {
		t.Fatalf("registration refused a public address: %v", err)
	}

	f := newFixture(t)
	e := f.endpoint(t, raw, outbox.OrderPaid)
	id := f.announce(t, outbox.OrderPaid, map[string]string{"order_id": "1"})
	f.sequence(t)
	dns.set("rebind.example", "127.0.0.1")
	s := webhook.NewSender(f.db, f.gen, f.anomalies, []time.Duration{time.Hour}, 2*time.Second).UsePolicy(policy).UseKeys(testKeys())
	if n, err := s.RunOnce(context.Background()); n != 1 || err != nil {
		t.Fatalf("sent %d (%v), want 1", n, err)
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("the receiver on loopback got %d connections, want 0", n)
	}
	var a webhook.Attempt
	if err := f.db.Where("endpoint_id = ? AND event_id = ?", e.ID, id).Take(&a).Error; err != nil {
		t.Fatal(err)
	}
	if a.StatusCode != 0 || a.Error == nil || !strings.Contains(*a.Error, "loopback") {
		t.Errorf("attempt %d %v, want no answer and an error naming loopback", a.StatusCode, a.Error)
	}
}

// TestDialerChecksEveryAddress: the dialer refuses a literal address in any spelling and a
// name whose every address is refused, and tries the allowed ones of a mixed answer.
func TestDialerChecksEveryAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	dns := &fakeDNS{}
	dns.set("two.example", "10.9.9.9", "127.0.0.1")
	strict := webhook.AddressPolicy{Resolver: dns}
	for _, addr := range []string{"127.0.0.1:" + port, "127.1:" + port, "2130706433:" + port, "0x7f000001:" + port, "[::ffff:127.0.0.1]:" + port, "two.example:" + port, "localhost:" + port} {
		_, err := strict.DialContext(context.Background(), "tcp", addr)
		var r *webhook.Refusal
		if !errors.As(err, &r) {
			t.Errorf("dial %s: %v, want a refusal", addr, err)
		}
	}
	dev := webhook.AddressPolicy{Dev: true, Resolver: dns}
	c, err := dev.DialContext(context.Background(), "tcp", "two.example:"+port)
	if err != nil {
		t.Fatalf("dev dial of a name with a private and a loopback address: %v, want the loopback one", err)
	}
	c.Close()
	if _, err := dev.DialContext(context.Background(), "tcp", "127.0.0.1:99999"); err == nil {
		t.Error("dial of port 99999 succeeded")
	}
}

// TestRedirectIsAFailedAttempt: a 3xx is not followed, so no signed body reaches an address the
// registration never saw.
func TestRedirectIsAFailedAttempt(t *testing.T) {
	var followed atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { followed.Add(1) }))
	t.Cleanup(target.Close)
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirect.Close)
	client := webhook.AddressPolicy{Dev: true}.Client()
	client.Transport.(*http.Transport).TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	resp, err := client.Post(redirect.URL, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTemporaryRedirect || followed.Load() != 0 {
		t.Errorf("status %d, followed %d times; want 307 and never followed", resp.StatusCode, followed.Load())
	}
}
