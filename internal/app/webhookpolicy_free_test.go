package app

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
	"github.com/oncepay/oncepay/internal/webhook"
)

// TestWebhookPolicyGuardsEmbeddedServicesOnFreePorts: with the embedded Redis and Kafka on
// free ports (ONCEPAY_EMBEDDED_REDIS_ADDR=127.0.0.1:0, ONCEPAY_EMBEDDED_KAFKA_ADDR=127.0.0.1:0)
// and dev mode allowing loopback, a webhook is refused the ports they actually listen on:
// the configured port 0 guarded none (hostile pass of issue 27; the simulator had the same
// hole, see webhookPolicy).
func TestWebhookPolicyGuardsEmbeddedServicesOnFreePorts(t *testing.T) {
	cfg, err := config.LoadFrom(func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = t.TempDir()
	cfg.WebhookDev = true
	cfg.EmbeddedChannelAddr = "127.0.0.1:0"
	cfg.EmbeddedRedisAddr = "127.0.0.1:0"
	cfg.EmbeddedKafkaAddr = "127.0.0.1:0"
	a, err := New(context.Background(), cfg, Deps{DB: testenv.DB(t)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(a.Close)
	if a.Redis.Embedded == nil || a.Kafka.Embedded == nil {
		t.Fatal("want the embedded Redis and Kafka")
	}
	addrs := append([]string{a.Redis.Embedded.Addr()}, a.Kafka.Brokers...)
	for _, addr := range addrs {
		for _, u := range []string{"http://" + addr + "/", "http://" + strings.Replace(addr, "127.0.0.1", "localhost", 1) + "/"} {
			err := a.webhookPolicy.CheckURL(context.Background(), u)
			if e, ok := apperr.As(err); !ok || e.Code != "url_refused" || !strings.Contains(e.Detail, string(webhook.RuleOwn)) {
				t.Errorf("%s: %v, want url_refused (own_address)", u, err)
			}
		}
	}
}

// TestWebhookPolicyGuardsTheListenerOnAFreePort: with oncepay's own listener on a free port
// (ONCEPAY_HTTP_ADDR=127.0.0.1:0, the default public URL on port 0 too) and dev mode allowing
// loopback, a webhook is refused the port it actually listens on, once it listens: the
// configured port 0 guarded none.
func TestWebhookPolicyGuardsTheListenerOnAFreePort(t *testing.T) {
	cfg, err := config.LoadFrom(func(k string) (string, bool) {
		if k == "ONCEPAY_HTTP_ADDR" {
			return "127.0.0.1:0", true
		}
		return "", false
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = t.TempDir()
	cfg.WebhookDev = true
	cfg.EmbeddedChannelAddr = "127.0.0.1:0"
	cfg.EmbeddedRedisAddr = "127.0.0.1:0"
	cfg.EmbeddedKafkaAddr = "127.0.0.1:0"
	a, err := New(context.Background(), cfg, Deps{DB: testenv.DB(t)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(a.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = a.Run(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-stopped })

	for _, u := range []string{"http://" + ln.Addr().String() + "/v1/orders", "http://" + strings.Replace(ln.Addr().String(), "127.0.0.1", "localhost", 1) + "/"} {
		var err error
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if err = a.webhookPolicy.CheckURL(context.Background(), u); err != nil {
				break
			}
		}
		if e, ok := apperr.As(err); !ok || e.Code != "url_refused" || !strings.Contains(e.Detail, string(webhook.RuleOwn)) {
			t.Errorf("%s: %v, want url_refused (own_address)", u, err)
		}
	}
}
