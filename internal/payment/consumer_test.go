package payment_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/oncepay/oncepay/internal/notify"
	kafkax "github.com/oncepay/oncepay/internal/platform/kafka"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// TestConsumerDeadLettersUnparseable: a signed message that is not a notification goes to
// payment.notifications.dlq with X-Reject-Reason "unparseable: <error>", is committed, and
// does not block its partition: a valid notification behind it on the same partition (same
// key) is applied.
func TestConsumerDeadLettersUnparseable(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Loops)
	before := stockOf(t, s, basket)
	o := s.CreateOrder(t, apptest.AliceKey, "dlq-order", basket...)
	tradeNo := "T-DLQ-" + o.OrderID
	good := apptest.JSON(apptest.Notification(o, "alipay", tradeNo))
	bad := []byte(`{"channel":"alipay","trade_no":` + tradeNo) // cut off mid-value

	w := s.Writer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// One call, one key: both land on one partition, the bad one first.
	err := w.WriteMessages(ctx,
		kafka.Message{Topic: kafkax.TopicPaymentNotifications, Key: []byte(tradeNo), Value: bad,
			Headers: []kafka.Header{{Key: kafkax.HeaderRequestID, Value: []byte("req-dlq-test")}, signature(s.Config.ChannelSecret, bad)}},
		kafka.Message{Topic: kafkax.TopicPaymentNotifications, Key: []byte(tradeNo), Value: good,
			Headers: []kafka.Header{signature(s.Config.ChannelSecret, good)}},
	)
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	s.WaitConsumed(t)

	dlq := s.Messages(t, kafkax.TopicPaymentNotificationsDLQ)
	if len(dlq) != 1 {
		t.Fatalf("dead-lettered %d messages, want 1", len(dlq))
	}
	m := dlq[0]
	if string(m.Value) != string(bad) || string(m.Key) != tradeNo {
		t.Errorf("dead letter key %q value %q, want the original %q %q", m.Key, m.Value, tradeNo, bad)
	}
	if r := apptest.Header(m, notify.HeaderRejectReason); !strings.HasPrefix(r, notify.ReasonUnparseable+": ") {
		t.Errorf("dead letter X-Reject-Reason %q, want %q and the error: %+v", r, notify.ReasonUnparseable+": ", m.Headers)
	}
	if got := apptest.Header(m, kafkax.HeaderRequestID); got != "req-dlq-test" {
		t.Errorf("dead letter X-Request-Id %q, want the original's req-dlq-test", got)
	}
	wantPaidOnce(t, s, o, "alipay", tradeNo, before)
}

// TestConsumerOnly: a notification that arrives only through Kafka pays the order by itself,
// and its order.paid event carries the message's request id.
func TestConsumerOnly(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Loops)
	before := stockOf(t, s, basket)
	o := s.CreateOrder(t, apptest.AliceKey, "kafka-order", basket...)
	tradeNo := "T-KAFKA-" + o.OrderID
	w := s.Writer(t)
	value := apptest.JSON(apptest.Notification(o, "alipay", tradeNo))
	err := w.WriteMessages(context.Background(), kafka.Message{
		Topic: kafkax.TopicPaymentNotifications, Key: []byte(tradeNo), Value: value,
		Headers: []kafka.Header{{Key: kafkax.HeaderRequestID, Value: []byte("req-from-kafka")}, signature(s.Config.ChannelSecret, value)},
	})
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	s.WaitConsumed(t)
	wantPaidOnce(t, s, o, "alipay", tradeNo, before)
	for _, e := range s.OrderEvents(t, o.OrderID) {
		if e.Type == "order.paid" && e.RequestID != "req-from-kafka" {
			t.Errorf("order.paid carries X-Request-Id %q, want the message's req-from-kafka", e.RequestID)
		}
	}
}
