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

// Partitions is the number of partitions each of oncepay's topics is created with, by the
// embedded broker and by EnsureTopics on a real cluster. A partition is Kafka's unit of both
// parallelism and order: the members of a consumer group share the partitions, one member per
// partition, and each partition is handled in offset order, so that every copy of one trade_no
// (the key) queues behind the others. Six lets up to six instances consume at once (more
// instances idle) and divides evenly among two, three or six. A topic that already exists keeps
// its count: EnsureTopics never changes it, because adding partitions to a keyed topic moves
// keys to other partitions.
const Partitions = 6

// The consumer group timings of Group and Reader. They decide how soon the partitions of a
// member that died without leaving the group (a killed process, a cut network) go to the
// other members: the coordinator declares it dead SessionTimeout after its last heartbeat,
// then rebalances, and the survivors learn of the rebalance at their next heartbeat. The
// messages the dead member had not committed are then redelivered to a survivor about
// SessionTimeout + HeartbeatInterval after the death (about 7s). A member that stops
// gracefully sends LeaveGroup instead, and the group rebalances at once.
const (
	// SessionTimeout is 6s, Kafka's default group.min.session.timeout.ms: the shortest session a
	// broker accepts unless it is configured otherwise. Shorter would also take a long pause (a
	// GC, a saturated host) for a death and rebalance for nothing.
	SessionTimeout = 6 * time.Second
	// HeartbeatInterval is well under a third of SessionTimeout, as Kafka advises, so that one
	// lost heartbeat does not evict a live member; it is also how late a survivor may learn that
	// a rebalance began.
	HeartbeatInterval = time.Second
	// RebalanceTimeout is how long the coordinator waits for every member to rejoin during a
	// rebalance, so it is the most a member that dies during a rebalance delays the others. A
	// live member of Group rejoins within a heartbeat: the end of its generation cancels the
	// message in hand (internal/notify's Consumer), which the partition's next owner redelivers.
	RebalanceTimeout = 6 * time.Second
	// joinGroupBackoff is the pause before a member tries again to join after a failed join.
	joinGroupBackoff = 500 * time.Millisecond
)

// The fetch settings of every reader: a fetch answers as soon as one byte is there, or after
// fetchMaxWait, with at most fetchMaxBytes.
const (
	fetchMinBytes = 1
	fetchMaxBytes = 10 << 20
	fetchMaxWait  = 250 * time.Millisecond
)

// Cluster is a set of broker addresses and, when Kafka is embedded, the broker behind them.
type Cluster struct {
	// Brokers are the bootstrap addresses.
	Brokers []string
	// Embedded is the in-process broker, or nil when Kafka is external.
	Embedded *kfake.Cluster
	// Dial, when set, opens every connection that the Readers and Writers of this Cluster make
	// to the brokers, instead of a net.Dialer. Tests give each instance its own Cluster with its
	// own Dial and cut one instance off the brokers with it, as a crash or a partition would:
	// its connections drop and its LeaveGroup never arrives.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// ClientID, when set, names this client to the brokers: it shows in their logs and begins
	// the member id the group coordinator gives a consumer. The range assignor hands out
	// partitions in member-id order, so tests that need to know which member gets which
	// partitions name their members.
	ClientID string
}

// EmbeddedOptions configures the in-process broker.
type EmbeddedOptions struct {
	// Addr is host:port to listen on; port 0 picks a free one.
	Addr string
	// DataDir persists topics, messages and committed offsets across restarts; empty keeps them
	// in memory. kfake writes each produced batch and each offset commit to its files before it
	// answers, so a process killed with SIGKILL loses nothing it acknowledged: the page cache
	// keeps the writes. Only a crash of the machine can lose the tail, unless SyncWrites is set.
	DataDir string
	// SyncWrites makes the broker fsync every batch it writes to DataDir before it answers, so
	// that an acknowledged message survives a crash of the machine too, at the cost of one fsync
	// per batch.
	SyncWrites bool
	// Advertise, when set, is the host:port the broker announces in its metadata instead of
	// the address it listens on: the address of a proxy in front of it (the chaos run's
	// toxiproxy), so that clients stay behind the proxy after their
	// first metadata request.
	Advertise string
}

// advertising is a kfake.ListenFn whose listener reports addr as its address: kfake announces
// its listener's address to clients.
func advertising(addr string) func(network, address string) (net.Listener, error) {
	return func(network, address string) (net.Listener, error) {
		ln, err := net.Listen(network, address)
		if err != nil {
			return nil, err
		}
		tcp, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("advertised address %q: %w", addr, err)
		}
		return advertised{Listener: ln, addr: tcp}, nil
	}
}

// advertised is a listener that reports another address.
type advertised struct {
	net.Listener
	addr net.Addr
}

// Addr is the advertised address.
func (a advertised) Addr() net.Addr { return a.addr }

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
			kfake.DefaultNumPartitions(Partitions),
			kfake.AllowAutoTopicCreation(),
			kfake.SeedTopics(Partitions, Topics...),
		}
		if embedded.Advertise != "" {
			opts = append(opts, kfake.ListenFn(advertising(embedded.Advertise)))
		}
		if embedded.DataDir != "" {
			opts = append(opts, kfake.DataDir(embedded.DataDir))
			if embedded.SyncWrites {
				opts = append(opts, kfake.SyncWrites())
			}
		}
		k, err := kfake.NewCluster(opts...)
		if err != nil {
			return nil, fmt.Errorf("start embedded kafka on %s (set ONCEPAY_EMBEDDED_KAFKA_ADDR to another port): %w", embedded.Addr, err)
		}
		c.Embedded = k
		c.Brokers = k.ListenAddrs()
		return c, nil
	}
	if err := c.EnsureTopics(ctx, Partitions, Topics...); err != nil {
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

// EnsureTopics creates the topics that do not exist yet, with partitions partitions each; the
// partition count of a topic that exists is left as it is.
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

// Ping checks that a broker answers a metadata request now. Each ping has a transport of its
// own, closed afterwards: kafka-go's transports answer a metadata request from the metadata they
// cached (kafka-go transport.go, connPool.roundTrip), so a client on a shared transport, such as
// kafka.DefaultTransport, would go on reporting a broker that was killed as up until its next
// refresh of the metadata, and a dead pooled connection to a broker that came back would fail
// the first ping after its restart.
func (c *Cluster) Ping(ctx context.Context) error {
	t := &kafka.Transport{Dial: c.Dial}
	defer t.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(c.Brokers...), Timeout: 2 * time.Second, Transport: t}
	_, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{TopicOrderEvents}})
	return err
}

// Writer returns a producer that waits for every in-sync replica and hashes keys to
// partitions, so that all events of one order stay in order.
func (c *Cluster) Writer() *kafka.Writer {
	w := &kafka.Writer{
		Addr:                   kafka.TCP(c.Brokers...),
		Balancer:               &kafka.Hash{},
		RequiredAcks:           kafka.RequireAll,
		BatchTimeout:           5 * time.Millisecond,
		AllowAutoTopicCreation: true,
	}
	if c.Dial != nil {
		w.Transport = &kafka.Transport{Dial: c.Dial}
	}
	return w
}

// Reader returns a consumer-group reader that starts from the earliest offset when the group
// has no committed offset, commits only when the caller says so, and notices a dead member
// within the group timings above. Its commits are not tied to the generation that fetched the
// message (kafka-go's Reader sends them with its current one), so a message handled across a
// rebalance can move the group's offset back: oncepay's consumer uses Group instead, and
// tests read with this.
func (c *Cluster) Reader(group, topic string) *kafka.Reader {
	return kafka.NewReader(kafka.ReaderConfig{
		Dialer:            c.dialer(),
		Brokers:           c.Brokers,
		GroupID:           group,
		Topic:             topic,
		StartOffset:       kafka.FirstOffset,
		MinBytes:          fetchMinBytes,
		MaxBytes:          fetchMaxBytes,
		MaxWait:           fetchMaxWait,
		CommitInterval:    0,
		HeartbeatInterval: HeartbeatInterval,
		SessionTimeout:    SessionTimeout,
		RebalanceTimeout:  RebalanceTimeout,
		JoinGroupBackoff:  joinGroupBackoff,
	})
}

// dialer is the dialer of c's consumers: nil (kafka-go's default) unless c has a Dial or a
// ClientID.
func (c *Cluster) dialer() *kafka.Dialer {
	if c.Dial == nil && c.ClientID == "" {
		return nil
	}
	return &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true, DialFunc: c.Dial, ClientID: c.ClientID}
}

// Group returns a member of consumer group id on topic, with the group timings above, that
// starts from the earliest offset on a partition the group has not committed. Each of its
// generations (ConsumerGroup.Next) assigns partitions until the next rebalance, and commits
// through it carry its generation id, so that the coordinator refuses the commit of a member
// whose partitions were handed to another (ILLEGAL_GENERATION).
func (c *Cluster) Group(id, topic string) (*kafka.ConsumerGroup, error) {
	return kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                id,
		Brokers:           c.Brokers,
		Dialer:            c.dialer(),
		Topics:            []string{topic},
		StartOffset:       kafka.FirstOffset,
		HeartbeatInterval: HeartbeatInterval,
		SessionTimeout:    SessionTimeout,
		RebalanceTimeout:  RebalanceTimeout,
		JoinGroupBackoff:  joinGroupBackoff,
	})
}

// PartitionReader returns a reader of one partition of topic, outside any group: a member of a
// Group reads each partition it is assigned with one, from the offset the generation gives.
func (c *Cluster) PartitionReader(topic string, partition int) *kafka.Reader {
	return kafka.NewReader(kafka.ReaderConfig{
		Dialer:    c.dialer(),
		Brokers:   c.Brokers,
		Topic:     topic,
		Partition: partition,
		MinBytes:  fetchMinBytes,
		MaxBytes:  fetchMaxBytes,
		MaxWait:   fetchMaxWait,
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
