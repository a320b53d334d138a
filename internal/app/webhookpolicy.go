package app

import (
	"context"

	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/webhook"
)

// webhookPolicy is the address policy of webhooks (issue 27): public addresses, plus
// ONCEPAY_WEBHOOK_ALLOW_CIDRS, plus loopback in dev; never a metadata address and never
// oncepay's own listener, its embedded Redis and Kafka, or a channel's API — a webhook aimed at
// the simulator's pay URL would pay an order.
func webhookPolicy(ctx context.Context, cfg config.Config) webhook.AddressPolicy {
	own := []string{cfg.HTTPAddr, cfg.PublicURL}
	if cfg.EmbeddedChannel() {
		own = append(own, cfg.EmbeddedChannelAddr)
	}
	if cfg.EmbeddedRedis() {
		own = append(own, cfg.EmbeddedRedisAddr)
	}
	if cfg.EmbeddedKafka() {
		own = append(own, cfg.EmbeddedKafkaAddr)
	}
	for _, ch := range cfg.Channels {
		if ch.URL != "" {
			own = append(own, ch.URL)
		}
	}
	return webhook.AddressPolicy{Dev: cfg.WebhookDev, Allow: cfg.WebhookAllowCIDRs, Own: webhook.OwnAddrs(ctx, nil, own...)}
}
