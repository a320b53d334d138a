package webhook_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/idempotent/httpkey"
	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/webhook"
)

// TestFailedAttemptsNeverShowTheURLsSecret: a receiver URL may carry a capability token in its
// path or query (https://hooks.example.com/services/T000/B000/XXXX, ?token=…). Go's
// *url.Error quotes the whole URL, so every failed attempt wrote the token into the delivery
// log's error, the webhook_failing anomaly and the sender's log line. Whatever the failure —
// connection refused, no answer in time, a TLS failure, a bad status, a refused address —
// the URL shows as scheme://host:port only; the endpoint row alone keeps it whole.
func TestFailedAttemptsNeverShowTheURLsSecret(t *testing.T) {
	const secretPath, secretQuery, secretFrag = "XXXXSECRETPATH", "SECRETQUERY", "SECRETFRAG"
	tail := "/services/T000/B000/" + secretPath + "?token=" + secretQuery
	secrets := []string{secretPath, secretQuery, secretFrag, "T000/B000", "token="}

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + closed.Addr().String()
	closed.Close() // connection refused
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select { // no answer in time
		case <-r.Context().Done():
		case <-time.After(2 * time.Second):
		}
	}))
	t.Cleanup(hang.Close)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	t.Cleanup(plain.Close)
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) }))
	t.Cleanup(bad.Close)
	tlsPlain := "https://" + strings.TrimPrefix(plain.URL, "http://") // TLS to a plain HTTP server

	dns := &fakeDNS{}
	dns.set("rebind.example", "10.0.0.7") // refused by the address policy at the dial
	urls := map[string]string{
		"refused": refused + tail, "timeout": hang.URL + tail, "tls": tlsPlain + tail, "status": bad.URL + tail,
		"policy": "https://rebind.example:8443" + tail, "userinfo": "http://user:PASSSECRET@" + strings.TrimPrefix(bad.URL, "http://") + tail + "#" + secretFrag,
	}
	secrets = append(secrets, "PASSSECRET")

	var logs bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(io.MultiWriter(&logs), &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(prev) })

	f := newFixture(t)
	ctx := context.Background()
	byName := map[string]webhook.Endpoint{}
	for name, u := range urls {
		byName[name] = f.endpoint(t, u, outbox.OrderPaid)
	}
	f.announce(t, outbox.OrderPaid, map[string]string{"order_id": "secret"})
	f.sequence(t)
	// No retry: the first failure fails the delivery, marks the endpoint failing and records
	// the anomaly.
	s := webhook.NewSender(f.db, f.gen, anomaly.NewRecorder(f.db, f.gen), nil, 300*time.Millisecond).
		UsePolicy(webhook.AddressPolicy{Dev: true, Resolver: dns}).UseKeys(testKeys())
	if n, err := s.RunOnce(ctx); n != len(urls) || err != nil {
		t.Fatalf("sent %d (%v), want %d", n, err, len(urls))
	}

	leaks := func(where, text string) {
		t.Helper()
		for _, sec := range secrets {
			if strings.Contains(text, sec) {
				t.Errorf("%s shows %q: %s", where, sec, text)
			}
		}
	}
	h := webhook.NewHandler(f.db, f.gen, f.endpoints, httpkey.Handler{}, webhook.AddressPolicy{Dev: true}, time.Hour)
	api := httptest.NewServer(h.Routes())
	t.Cleanup(api.Close)
	for name, e := range byName {
		resp, err := http.Get(api.URL + "/" + ids.Format(e.ID) + "/deliveries")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), `"error":"`) {
			t.Errorf("%s: the delivery log shows no error: %s", name, body)
		}
		leaks(name+": the delivery log", string(body))
		var a webhook.Attempt
		if err := f.db.Where("endpoint_id = ?", e.ID).Take(&a).Error; err != nil {
			t.Fatal(err)
		}
		if a.Error != nil {
			leaks(name+": the attempt's error", *a.Error)
		}
		if got, _ := f.endpoints.Get(ctx, f.db, e.ID); got.URL != urls[name] {
			t.Errorf("%s: the endpoint row holds %q, want the URL whole", name, got.URL)
		}
	}
	var kept []anomaly.Anomaly
	f.db.Where("kind = ?", anomaly.WebhookFailing).Find(&kept)
	if len(kept) != len(urls) {
		t.Errorf("%d webhook_failing anomalies, want %d", len(kept), len(urls))
	}
	for _, a := range kept {
		leaks("the anomaly", a.Detail+" "+a.TradeNo)
		if !strings.Contains(a.Detail, "http") {
			t.Errorf("the anomaly names no receiver: %s", a.Detail)
		}
	}
	if !strings.Contains(logs.String(), "last_error") {
		t.Errorf("no failure was logged: %s", logs.String())
	}
	leaks("the log", logs.String())
}
