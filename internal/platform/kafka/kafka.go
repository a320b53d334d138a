// Package kafka connects oncepay to Kafka through segmentio/kafka-go: real brokers when they
// are configured, an in-process franz-go kfake broker listening on TCP otherwise. It names the
// contract's topics and carries the request id in message headers.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// The contract's topics.
const (
	// TopicPaymentNotifications carries payment notifications, keyed by trade_no (I1).
	TopicPaymentNotifications = "payment.notifications"
	// TopicPaymentNotificationsDLQ receives the notifications the consumer rejects —
	// unsigned, wrongly signed, unparseable, a key reused with another body, a trade of
	// another order — each with its X-Reject-Reason header.
	TopicPaymentNotificationsDLQ = "payment.notifications.dlq"
	// TopicOrderEvents carries order events published from the outbox, keyed by order_id.
	TopicOrderEvents = "order.events"
)

// Topics lists every topic oncepay uses.
var Topics = []string{TopicPaymentNotifications, TopicPaymentNotificationsDLQ, TopicOrderEvents}

// HeaderRequestID is the message header that carries X-Request-Id across Kafka.
const HeaderRequestID = "X-Request-Id"

// Cluster is a set of broker addresses and, when Kafka is embedded, the broker behind them.
type Cluster struct {
	// Brokers are the bootstrap addresses.
	Brokers []string
	// Embedded is the in-process broker, or nil when Kafka is external.
	Embedded *kfake.Cluster
}

// EmbeddedOptions configures the in-process broker.
type EmbeddedOptions struct {
	// Addr is host:port to listen on; port 0 picks a free one.
	Addr string
	// DataDir persists topics and committed offsets across restarts; empty keeps them in memory.
	DataDir string
}

// Open returns the cluster at brokers, or starts an embedded one when brokers is empty. The
// contract's topics are created when missing.
func Open(ctx context.Context, brokers []string, embedded EmbeddedOptions) (*Cluster, error) {
	c := &Cluster{Brokers: brokers}
	if len(brokers) == 0 {
		port, err := portOf(embedded.Addr)
		if err != nil {
			return nil, err
		}
		opts := []kfake.Opt{
			kfake.Ports(port),
			kfake.NumBrokers(1),
			kfake.DefaultNumPartitions(3),
			kfake.AllowAutoTopicCreation(),
			kfake.SeedTopics(3, Topics...),
		}
		if embedded.DataDir != "" {
			opts = append(opts, kfake.DataDir(embedded.DataDir))
		}
		k, err := kfake.NewCluster(opts...)
		if err != nil {
			return nil, fmt.Errorf("start embedded kafka on %s (set ONCEPAY_EMBEDDED_KAFKA_ADDR to another port): %w", embedded.Addr, err)
		}
		c.Embedded = k
		c.Brokers = k.ListenAddrs()
		return c, nil
	}
	if err := c.EnsureTopics(ctx, 3, Topics...); err != nil {
		return nil, err
	}
	return c, nil
}

func portOf(addr string) (int, error) {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, fmt.Errorf("ONCEPAY_EMBEDDED_KAFKA_ADDR=%q: %w", addr, err)
	}
	return strconv.Atoi(p)
}

// EnsureTopics creates the topics that do not exist yet.
func (c *Cluster) EnsureTopics(ctx context.Context, partitions int, topics ...string) error {
	client := &kafka.Client{Addr: kafka.TCP(c.Brokers...), Timeout: 10 * time.Second}
	req := &kafka.CreateTopicsRequest{}
	for _, t := range topics {
		req.Topics = append(req.Topics, kafka.TopicConfig{Topic: t, NumPartitions: partitions, ReplicationFactor: 1})
	}
	resp, err := client.CreateTopics(ctx, req)
	if err != nil {
		return fmt.Errorf("create kafka topics: %w", err)
	}
	for topic, err := range resp.Errors {
		if err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
			return fmt.Errorf("create kafka topic %s: %w", topic, err)
		}
	}
	return nil
}

// Ping checks that a broker answers a metadata request.
func (c *Cluster) Ping(ctx context.Context) error {
	client := &kafka.Client{Addr: kafka.TCP(c.Brokers...), Timeout: 2 * time.Second}
	_, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{TopicOrderEvents}})
	return err
}

// Writer returns a producer that waits for every in-sync replica and hashes keys to
// partitions, so that all events of one order stay in order.
func (c *Cluster) Writer() *kafka.Writer {
	return &kafka.Writer{
		Addr:                   kafka.TCP(c.Brokers...),
		Balancer:               &kafka.Hash{},
		RequiredAcks:           kafka.RequireAll,
		BatchTimeout:           5 * time.Millisecond,
		AllowAutoTopicCreation: true,
	}
}

// Reader returns a consumer-group reader that starts from the earliest offset when the group
// has no committed offset, and commits only when the caller says so.
func (c *Cluster) Reader(group, topic string) *kafka.Reader {
	return kafka.NewReader(kafka.ReaderConfig{
		Brokers:           c.Brokers,
		GroupID:           group,
		Topic:             topic,
		StartOffset:       kafka.FirstOffset,
		MinBytes:          1,
		MaxBytes:          10 << 20,
		MaxWait:           250 * time.Millisecond,
		CommitInterval:    0,
		HeartbeatInterval: time.Second,
		SessionTimeout:    10 * time.Second,
		RebalanceTimeout:  10 * time.Second,
		JoinGroupBackoff:  500 * time.Millisecond,
	})
}

// RequestID returns the request id header of m, or "".
func RequestID(m kafka.Message) string {
	for _, h := range m.Headers {
		if h.Key == HeaderRequestID {
			return string(h.Value)
		}
	}
	return ""
}

// Close stops the embedded broker, if any.
func (c *Cluster) Close() {
	if c.Embedded != nil {
		c.Embedded.Close()
	}
}
