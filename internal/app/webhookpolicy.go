package app

import (
	"context"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/webhook"
)

// webhookPolicy is the address policy of webhooks (issue 27): public addresses, plus
// ONCEPAY_WEBHOOK_ALLOW_CIDRS, plus loopback in dev; never a metadata address and never
// oncepay's own listener, its embedded Redis and Kafka, or a channel's API — a webhook aimed at
// the simulator's pay URL would pay an order. channelURL is the channel's base URL as started:
// the embedded simulator's real address, which ONCEPAY_EMBEDDED_CHANNEL_ADDR does not tell when
// its port is 0 (a free one, as every test instance runs it): the configured 127.0.0.1:0 alone
// guarded no port at all, and a webhook to the simulator's pay URL paid the order (hostile
// pass of issue 27). running are the addresses the embedded Redis and Kafka listen on as
// started, for the same reason: on ONCEPAY_EMBEDDED_REDIS_ADDR=127.0.0.1:0 or
// ONCEPAY_EMBEDDED_KAFKA_ADDR=127.0.0.1:0 the configured address guarded no port (a further
// hostile pass of issue 27).
func webhookPolicy(ctx context.Context, cfg config.Config, channelURL string, running ...string) webhook.AddressPolicy {
	own := append([]string{cfg.HTTPAddr, cfg.PublicURL}, running...)
	if cfg.EmbeddedChannel() {
		own = append(own, cfg.EmbeddedChannelAddr, channelURL)
	}
	// The dependencies, embedded or not: a webhook to the Redis, Kafka or database of this
	// deployment is refused even in dev mode and inside ONCEPAY_WEBHOOK_ALLOW_CIDRS (they were
	// own addresses only when embedded; hostile pass of issue 27).
	if cfg.EmbeddedRedis() {
		own = append(own, cfg.EmbeddedRedisAddr)
	}
	own = append(own, cfg.RedisAddrs...)
	if cfg.EmbeddedKafka() {
		own = append(own, cfg.EmbeddedKafkaAddr)
	}
	own = append(own, cfg.KafkaBrokers...)
	if dsn, err := mysql.ParseDSN(cfg.MySQLDSN); cfg.MySQLDSN != "" && err == nil && strings.HasPrefix(dsn.Net, "tcp") {
		own = append(own, dsn.Addr)
	}
	for _, ch := range cfg.Channels {
		if ch.URL != "" {
			own = append(own, ch.URL)
		}
	}
	return webhook.AddressPolicy{Dev: cfg.WebhookDev, Allow: cfg.WebhookAllowCIDRs, Own: webhook.OwnAddrs(ctx, nil, own...)}
}
