package app

import (
	"context"
	"net/netip"
	"testing"

	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/platform/apperr"
)

// TestWebhookPolicyGuardsTheDependencies: in dev mode (loopback allowed; the chaos run's
// setting, on a real database) and with an operator's CIDR that covers the private network
// the dependencies live on, a webhook is never aimed at oncepay's own Redis, Kafka or
// database, embedded or not: they are own addresses (hostile pass of issue 27 — only the
// embedded ones were, so ONCEPAY_REDIS_ADDR=127.0.0.1:6379 with ONCEPAY_WEBHOOK_DEV=true, or
// 10.0.0.5:6379 inside ONCEPAY_WEBHOOK_ALLOW_CIDRS=10.0.0.0/8, took a webhook).
func TestWebhookPolicyGuardsTheDependencies(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		cfg  config.Config
		urls []string
	}{
		"dev on loopback": {
			cfg: config.Config{WebhookDev: true, HTTPAddr: "127.0.0.1:8080", PublicURL: "http://127.0.0.1:8080", ChannelURL: "http://127.0.0.1:7000",
				RedisAddrs: []string{"127.0.0.1:6379", "localhost:7001"}, KafkaBrokers: []string{"127.0.0.1:9092"},
				MySQLDSN: "root:pw@tcp(127.0.0.1:3306)/oncepay?parseTime=true"},
			urls: []string{"http://127.0.0.1:6379/", "http://[::ffff:127.0.0.1]:6379/", "http://127.0.0.1:7001/", "http://127.0.0.1:9092/",
				"http://127.0.0.1:3306/", "http://localhost:3306/"},
		},
		"an allowed private network": {
			cfg: config.Config{HTTPAddr: "10.0.0.2:8080", PublicURL: "https://pay.example.com", ChannelURL: "https://channel.example.com",
				WebhookAllowCIDRs: mustPrefixes("10.0.0.0/8"),
				RedisAddrs:        []string{"10.0.0.5:6379"}, KafkaBrokers: []string{"10.0.0.6:9092", "10.0.0.7:9092"},
				MySQLDSN: "oncepay:pw@tcp(10.0.0.8:3306)/oncepay"},
			urls: []string{"https://10.0.0.5:6379/", "https://10.0.0.6:9092/", "https://10.0.0.7:9092/", "https://10.0.0.8:3306/",
				"https://0xa000005:6379/"},
		},
	} {
		p := webhookPolicy(ctx, tc.cfg, tc.cfg.ChannelURL)
		for _, u := range tc.urls {
			err := p.CheckURL(ctx, u)
			if e, ok := apperr.As(err); !ok || e.Code != "url_refused" {
				t.Errorf("%s: %s: %v, want url_refused (own_address)", name, u, err)
			}
		}
		// A receiver beside them on another port is still allowed.
		other := "http://127.0.0.1:9999/hook"
		if !tc.cfg.WebhookDev {
			other = "https://10.0.0.9:8443/hook"
		}
		if err := p.CheckURL(ctx, other); err != nil {
			t.Errorf("%s: %s refused: %v", name, other, err)
		}
	}
}

func mustPrefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}
