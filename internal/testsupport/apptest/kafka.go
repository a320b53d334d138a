package apptest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/order"
	kafkax "github.com/oncepay/oncepay/internal/platform/kafka"
	"github.com/oncepay/oncepay/internal/platform/web"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// Writer returns a producer to the instance's Kafka, closed when the test ends. Messages name
// their topic.
func (s *Server) Writer(tb testing.TB) *kafka.Writer {
	tb.Helper()
	s.needKafka(tb, "Writer")
	w := s.Deps.Kafka.Writer()
	tb.Cleanup(func() { _ = w.Close() })
	return w
}

// PublishNotification writes body to payment.notifications keyed by its trade_no and signed
// with the default channel secret, config.DevChannelSecret (X-Signature), as a channel's message queue delivers it. It
// never fails the test, so storms can call it.
func PublishNotification(ctx context.Context, w *kafka.Writer, body []byte) error {
	var n struct {
		TradeNo string `json:"trade_no"`
	}
	if err := json.Unmarshal(body, &n); err != nil {
		return fmt.Errorf("notification body: %w", err)
	}
	return w.WriteMessages(ctx, kafka.Message{Topic: kafkax.TopicPaymentNotifications, Key: []byte(n.TradeNo), Value: body,
		Headers: []kafka.Header{{Key: web.HeaderSignature, Value: []byte(SignReport(config.DevChannelSecret, notify.Trade, body))}}})
}

func (s *Server) kafkaClient() *kafka.Client {
	return &kafka.Client{Addr: kafka.TCP(s.Deps.Kafka.Brokers...), Timeout: 10 * time.Second}
}

// partitions returns the partition ids of topic.
func (s *Server) partitions(ctx context.Context, topic string) ([]int, error) {
	md, err := s.kafkaClient().Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, err
	}
	for _, t := range md.Topics {
		if t.Name == topic && t.Error == nil {
			ps := make([]int, len(t.Partitions))
			for i, p := range t.Partitions {
				ps[i] = p.ID
			}
			return ps, nil
		}
	}
	return nil, fmt.Errorf("topic %s not in metadata", topic)
}

// offsets returns the first and end (high watermark) offset of every partition of topic.
func (s *Server) offsets(ctx context.Context, topic string) (map[int][2]int64, error) {
	ps, err := s.partitions(ctx, topic)
	if err != nil {
		return nil, err
	}
	var reqs []kafka.OffsetRequest
	for _, p := range ps {
		reqs = append(reqs, kafka.FirstOffsetOf(p), kafka.LastOffsetOf(p))
	}
	res, err := s.kafkaClient().ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, err
	}
	out := map[int][2]int64{}
	for _, p := range res.Topics[topic] {
		if p.Error != nil {
			return nil, fmt.Errorf("offsets of %s/%d: %w", topic, p.Partition, p.Error)
		}
		out[p.Partition] = [2]int64{p.FirstOffset, p.LastOffset}
	}
	return out, nil
}

// WaitConsumed waits until the payment consumer's group has committed every message on
// payment.notifications, that is until every copy published so far has been applied, found a
// duplicate, or dead-lettered.
func (s *Server) WaitConsumed(tb testing.TB) {
	tb.Helper()
	s.needKafka(tb, "WaitConsumed")
	Eventually(tb, 30*time.Second, "payment consumer caught up", func() (bool, string) {
		behind, err := s.Behind(context.Background())
		if err != nil {
			return false, err.Error()
		}
		return behind == "", behind
	})
}

// Behind says which partitions of payment.notifications the payment consumer's group has not
// committed to their end ("partition 2: committed 4, end 7"), or "" when none.
func (s *Server) Behind(ctx context.Context) (string, error) {
	topic := kafkax.TopicPaymentNotifications
	ends, err := s.offsets(ctx, topic)
	if err != nil {
		return "", err
	}
	ps := slices.Sorted(maps.Keys(ends))
	res, err := s.kafkaClient().OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: notify.Group, Topics: map[string][]int{topic: ps}})
	if err != nil {
		return "", err
	}
	committed := map[int]int64{}
	for _, p := range res.Topics[topic] {
		committed[p.Partition] = p.CommittedOffset
	}
	var behind []string
	for _, p := range ps {
		if fe := ends[p]; fe[1] > fe[0] && committed[p] != fe[1] {
			behind = append(behind, fmt.Sprintf("partition %d: committed %d, end %d", p, committed[p], fe[1]))
		}
	}
	return strings.Join(behind, "; "), nil
}

// Messages returns every message on topic at the time of the call, partition by partition in
// offset order.
func (s *Server) Messages(tb testing.TB, topic string) []kafka.Message {
	tb.Helper()
	s.needKafka(tb, "Messages")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := testenv.ReadTopic(ctx, s.kafkaClient(), topic)
	if err != nil {
		tb.Fatalf("read %s: %v", topic, err)
	}
	return out
}

// Header returns the value of m's header key, or "".
func Header(m kafka.Message, key string) string { return testenv.Header(m, key) }

// OrderEvent is a message of order.events with its decoded value.
type OrderEvent struct {
	order.Event
	// Key is the message key (the order id).
	Key string
	// HeaderEventID and RequestID are the message's event_id and X-Request-Id headers.
	HeaderEventID, RequestID string
}

// EventType is the event's type, for CountEvents.
func (e OrderEvent) EventType() string { return e.Type }

// OrderEvents waits until the relay has published every outbox row, then returns every
// message on order.events, those of orderID only unless it is "".
func (s *Server) OrderEvents(tb testing.TB, orderID string) []OrderEvent {
	tb.Helper()
	s.needKafka(tb, "OrderEvents")
	s.WaitOutboxPublished(tb)
	var out []OrderEvent
	for _, m := range s.Messages(tb, kafkax.TopicOrderEvents) {
		e := OrderEvent{Key: string(m.Key), HeaderEventID: Header(m, "event_id"), RequestID: Header(m, kafkax.HeaderRequestID)}
		if err := json.Unmarshal(m.Value, &e.Event); err != nil {
			tb.Fatalf("order.events offset %d: %q: %v", m.Offset, m.Value, err)
		}
		if orderID == "" || e.OrderID == orderID {
			out = append(out, e)
		}
	}
	return out
}
