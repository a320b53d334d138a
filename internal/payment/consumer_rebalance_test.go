package payment_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/notify"
	kafkax "github.com/oncepay/oncepay/internal/platform/kafka"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// TestConsumerCommitsOnlyInItsGeneration: a member that loses a partition in a rebalance
// while it is retrying a message of it commits nothing for that partition afterwards. The
// member that took the partition over applies the message and the copies behind it and
// commits past them; a late commit of the old member's message would move the group's offset
// back behind them, and the group would stay behind on a topic that has gone quiet (the chaos
// run's kafka_consumed saw 13 messages so). The old member here cannot apply its message while
// six newcomers join; it is first in member-id order ("a-stale"), and the range assignor gives
// the first of seven members none of six partitions, so the message's partition goes to a
// newcomer. Once the newcomers have committed everything, the old member may apply again: its
// message must never be committed by it, and the group must stay at the partition's end.
func TestConsumerCommitsOnlyInItsGeneration(t *testing.T) {
	const copies = 5
	s := apptest.StartHTTPOnly(t)
	before := stockOf(t, s, basket)
	o := s.CreateOrder(t, apptest.AliceKey, "stale-member", basket...)
	tradeNo := "T-STALE-" + o.OrderID
	value := apptest.JSON(apptest.Notification(o, "alipay", tradeNo))
	w := s.Writer(t)

	held := &heldPayments{next: realPayments(s), held: tradeNo}
	run(t, notify.NewConsumer(reportPort(s, held), &kafkax.Cluster{Brokers: s.Deps.Kafka.Brokers, ClientID: "a-stale"}))
	publish(t, w, tradeNo, value, signature(s.Config.ChannelSecret, value))
	apptest.Eventually(t, 30*time.Second, "the old member retrying the message", func() (bool, string) {
		n := held.count()
		return n >= 2, fmt.Sprintf("%d attempts", n)
	})

	for i := range kafkax.Partitions {
		run(t, notify.NewConsumer(s.App.Reports, &kafkax.Cluster{Brokers: s.Deps.Kafka.Brokers, ClientID: fmt.Sprintf("b-fresh-%d", i)}))
	}
	for range copies {
		publish(t, w, tradeNo, value, signature(s.Config.ChannelSecret, value))
	}
	s.WaitConsumed(t)
	wantAppliedOnce(t, s, o, tradeNo, before)

	// The old member's backoff is at most 5 s; give it that and more to try again.
	held.release()
	ctx := context.Background()
	for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		behind, err := s.Behind(ctx)
		if err != nil {
			t.Fatalf("read the group's offsets: %v", err)
		}
		if behind != "" {
			t.Fatalf("the group went back behind the partition's end (%s), the old member released after %d attempts: "+
				"a member committed a message of a partition it no longer owned", behind, held.count())
		}
	}
	wantAppliedOnce(t, s, o, tradeNo, before)
}

// run runs c until the test ends.
func run(t *testing.T, c *notify.Consumer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consumer: %v", err)
		}
	})
}

// heldPayments applies trade reports through next, except that every attempt at the trade
// held fails with errUnreachable, nothing applied, until release is called. It counts the
// attempts at held.
type heldPayments struct {
	next notify.Applier
	held string

	mu       sync.Mutex
	released bool
	attempts int
}

// Apply implements notify.Applier.
func (h *heldPayments) Apply(ctx context.Context, tx *gorm.DB, r notify.Report) (notify.Outcome, error) {
	h.mu.Lock()
	fail := r.Number == h.held && !h.released
	if r.Number == h.held {
		h.attempts++
	}
	h.mu.Unlock()
	if fail {
		return 0, errUnreachable
	}
	return h.next.Apply(ctx, tx, r)
}

func (h *heldPayments) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.released = true
}

func (h *heldPayments) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.attempts
}
