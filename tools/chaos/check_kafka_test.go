package chaos

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	okafka "github.com/oncepay/oncepay/internal/platform/kafka"
)

// brokerChecks are the checks of what the broker kept, which run when the checker has a
// kafkaView.
var brokerChecks = []string{"kafka_feed_complete", "kafka_keeps_acknowledged"}

// outboxMessage is the message the relay publishes for an outbox row (internal/outbox/relay.go).
func outboxMessage(id, key, payload string) kafka.Message {
	return kafka.Message{Topic: okafka.TopicOrderEvents, Key: []byte(key), Value: []byte(payload),
		Headers: []kafka.Header{{Key: okafka.HeaderRequestID, Value: []byte("req-" + id)}, {Key: "event_id", Value: []byte(id)}}}
}

// TestCheckerBroker breaks what the broker kept on purpose, in the consistent world of
// check_test.go (whose outbox holds event 9901, published): the checks of check_kafka.go name an
// event lost from order.events, one whose copy differs from its row, one that no row has, and a
// notification the broker acknowledged and lost; extra copies of an event are not violations.
func TestCheckerBroker(t *testing.T) {
	w := newDBWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	note := []byte(`{"trade_no":"TK1","amount":5998}`)
	acked := &event{Kind: kindKafka, Op: "notify", Key: "TK1", Req: string(note), Status: 1}
	consistent := func() *kafkaView {
		return &kafkaView{topics: map[string][]kafka.Message{
			okafka.TopicOrderEvents:          {outboxMessage("9901", "5001", "{}")},
			okafka.TopicPaymentNotifications: {{Topic: okafka.TopicPaymentNotifications, Key: []byte("TK1"), Value: note}},
		}}
	}
	cases := []struct {
		name   string
		breaks func(c *checker)
		check  string
		n      int
		detail []string
	}{
		{"consistent", func(*checker) {}, "", 0, nil},
		{"an event published twice (a retried publish)", func(c *checker) {
			c.kafka.topics[okafka.TopicOrderEvents] = append(c.kafka.topics[okafka.TopicOrderEvents], outboxMessage("9901", "5001", "{}"))
		}, "", 0, nil},
		{"a notification published twice, acknowledged once", func(c *checker) {
			c.kafka.topics[okafka.TopicPaymentNotifications] = append(c.kafka.topics[okafka.TopicPaymentNotifications], c.kafka.topics[okafka.TopicPaymentNotifications][0])
		}, "", 0, nil},
		{"an event marked published is not in its topic", func(c *checker) {
			c.kafka.topics[okafka.TopicOrderEvents] = nil
		}, "kafka_feed_complete", 1, []string{"outbox event 9901", "not in order.events: lost"}},
		{"an event's copy differs from its row", func(c *checker) {
			c.kafka.topics[okafka.TopicOrderEvents] = []kafka.Message{outboxMessage("9901", "5001", `{"status":"PAID"}`)}
		}, "kafka_feed_complete", 1, []string{"event 9901 differs from its outbox row", `{"status":"PAID"}`}},
		{"an event no outbox row has", func(c *checker) {
			c.kafka.topics[okafka.TopicOrderEvents] = append(c.kafka.topics[okafka.TopicOrderEvents], outboxMessage("424242", "5002", "{}"))
		}, "kafka_feed_complete", 1, []string{`event_id "424242"`, "no outbox event"}},
		{"an event still pending is in the topic", func(c *checker) {
			w.exec(t, `UPDATE outbox SET published_at = NULL WHERE id = 9901`)
		}, "outbox_published", 1, []string{"1 of 1 outbox events are not published"}},
		{"an acknowledged notification lost", func(c *checker) {
			c.kafka.topics[okafka.TopicPaymentNotifications] = nil
		}, "kafka_keeps_acknowledged", 1, []string{"notification TK1", "acknowledged 1 copies", "holds 0: lost"}},
		{"a notification acknowledged twice, held once", func(c *checker) {
			c.events = append(c.events, acked)
		}, "kafka_keeps_acknowledged", 1, []string{"notification TK1", "acknowledged 2 copies", "holds 1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w.reset(t)
			c := w.checker()
			c.events = append(c.events, acked)
			c.kafka = consistent()
			tc.breaks(c)
			if err := c.run(ctx); err != nil {
				t.Fatalf("run: %v", err)
			}
			var names []string
			for _, r := range c.results {
				names = append(names, r.Name)
			}
			for _, name := range brokerChecks {
				if !slices.Contains(names, name) {
					t.Errorf("check %s did not run with a kafkaView; ran %v", name, names)
				}
			}
			switch {
			case tc.check == "":
				for _, v := range c.violations {
					t.Errorf("violation of %s in a consistent world: %s", v.Check, v.Detail)
				}
			default:
				expectOnly(t, c, tc.check, tc.n)
				expectDetail(t, c, tc.check, tc.detail...)
			}
		})
	}
}
