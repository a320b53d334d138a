package payment_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/inventory"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/payment"
	kafkax "github.com/oncepay/oncepay/internal/platform/kafka"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// TestConsumerRetriesInPlace: a message whose first applications fail is retried in place,
// with backoff, until it applies. It is applied once and committed, and the message behind it
// on its partition waits for it: it is applied after it, not instead of it. Each failed
// attempt logs "trade report: will retry" with its number. The payments are the real ones, on
// the instance's database, Redis and broker; only their first attempts at one trade fail, as
// they would while the database is unreachable.
func TestConsumerRetriesInPlace(t *testing.T) {
	const failures = 3
	s := apptest.StartOnly(t, apptest.Kafka)
	logs := captureLogs(t)
	before := stockOf(t, s, basket)
	first := s.CreateOrder(t, apptest.AliceKey, "retry-first", basket...)
	second := s.CreateOrder(t, apptest.AliceKey, "retry-second", other...)
	firstTrade, secondTrade := "T-RETRY-"+first.OrderID, "T-RETRY-"+second.OrderID

	flaky := &flakyPayments{next: realPayments(s), failing: firstTrade, fails: failures}
	run(t, notify.NewConsumer(reportPort(s, flaky), s.Deps.Kafka))

	// One key: both land on one partition, the failing one first.
	w := s.Writer(t)
	failing := apptest.JSON(apptest.Notification(first, "alipay", firstTrade))
	behind := apptest.JSON(apptest.Notification(second, "alipay", secondTrade))
	publish(t, w, firstTrade, failing, signature(s.Config.ChannelSecret, failing))
	publish(t, w, firstTrade, behind, signature(s.Config.ChannelSecret, behind))
	s.WaitConsumed(t)

	want := append(slices.Repeat([]string{firstTrade}, failures+1), secondTrade)
	if got := flaky.applied(); !slices.Equal(got, want) {
		t.Errorf("applications in order %v, want %v: the failing message %d times, then the one behind it", got, want, failures+1)
	}
	wantAppliedOnce(t, s, first, firstTrade, before)
	wantAppliedOnce(t, s, second, secondTrade, nil)
	if got := logs.attempts("trade report: will retry"); !slices.Equal(got, []int64{0, 1, 2}) {
		t.Errorf("logged retries with attempts %v, want [0 1 2]", got)
	}
	if n := len(s.Messages(t, kafkax.TopicPaymentNotificationsDLQ)); n != 0 {
		t.Errorf("%d dead letters, want none: a failure that may pass is retried, never dead-lettered", n)
	}
}

// TestConsumerRetriesFetch: a consumer that cannot reach its broker does not stop. Joining its
// group fails (the coordinator is unreachable) and is tried again; once the broker is
// reachable, the consumer joins and applies the notification waiting for it.
func TestConsumerRetriesFetch(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Kafka)
	logs := captureLogs(t)
	before := stockOf(t, s, basket)
	o := s.CreateOrder(t, apptest.AliceKey, "fetch-retry", basket...)
	tradeNo := "T-FETCH-" + o.OrderID
	value := apptest.JSON(apptest.Notification(o, "alipay", tradeNo))
	publish(t, s.Writer(t), tradeNo, value, signature(s.Config.ChannelSecret, value))

	gate := &dialGate{closed: true}
	cluster := &kafkax.Cluster{Brokers: s.Deps.Kafka.Brokers, Dial: gate.dial}
	stopped := run(t, notify.NewConsumer(s.App.Reports, cluster))

	apptest.Eventually(t, 30*time.Second, "two failed joins logged", func() (bool, string) {
		if stopped() {
			return true, ""
		}
		n := logs.count("report consumer: join")
		return n >= 2, fmt.Sprintf("%d failed joins logged", n)
	})
	if stopped() {
		t.Fatalf("the consumer stopped after %d failed joins, while its context was still live", logs.count("report consumer: join"))
	}
	gate.open()
	s.WaitConsumed(t)
	wantAppliedOnce(t, s, o, tradeNo, before)
}

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
	s := apptest.StartOnly(t, apptest.Kafka)
	before := stockOf(t, s, basket)
	o := s.CreateOrder(t, apptest.AliceKey, "stale-member", basket...)
	tradeNo := "T-STALE-" + o.OrderID
	value := apptest.JSON(apptest.Notification(o, "alipay", tradeNo))
	w := s.Writer(t)

	held := &flakyPayments{next: realPayments(s), failing: tradeNo, fails: math.MaxInt}
	run(t, notify.NewConsumer(reportPort(s, held), &kafkax.Cluster{Brokers: s.Deps.Kafka.Brokers, ClientID: "a-stale"}))
	publish(t, w, tradeNo, value, signature(s.Config.ChannelSecret, value))
	apptest.Eventually(t, 30*time.Second, "the old member retrying the message", func() (bool, string) {
		n := len(held.applied())
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
	held.stopFailing()
	ctx := context.Background()
	for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		behind, err := s.Behind(ctx)
		if err != nil {
			t.Fatalf("read the group's offsets: %v", err)
		}
		if behind != "" {
			t.Fatalf("the group went back behind the partition's end (%s), the old member released after %d attempts: "+
				"a member committed a message of a partition it no longer owned", behind, len(held.applied()))
		}
	}
	wantAppliedOnce(t, s, o, tradeNo, before)
}

// run runs c until the test ends. stopped reports whether its Run has returned before then.
func run(t *testing.T, c *notify.Consumer) (stopped func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		err = c.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if err != nil {
			t.Errorf("consumer: %v", err)
		}
	})
	return func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
}

// wantAppliedOnce fails the test unless order o is PAID by tradeNo with one payments row and
// one order.paid outbox row, and, when before is set, its lines sold once from the stock
// before. It is wantPaidOnce for an instance without its outbox relay (StartHTTPOnly).
func wantAppliedOnce(t *testing.T, s *apptest.Server, o order.View, tradeNo string, before map[string]inventory.Item) {
	t.Helper()
	wantPaidBy(t, s, o, tradeNo)
	if n := apptest.CountEvents(s.OutboxEvents(t, o.OrderID), "order.paid"); n != 1 {
		t.Errorf("order %s: %d order.paid outbox rows, want 1", o.OrderID, n)
	}
	for _, it := range o.Items {
		if before == nil {
			break
		}
		if b, a := before[it.SKU], s.Inventory(t, it.SKU); a.Sold != b.Sold+it.Quantity || a.Available != b.Available-it.Quantity {
			t.Errorf("%s: available/sold %d/%d, want %d/%d", it.SKU, a.Available, a.Sold, b.Available-it.Quantity, b.Sold+it.Quantity)
		}
	}
}

// realPayments returns the trade applier of the instance, built anew on its database: the
// Applier app.New registers for trade reports.
func realPayments(s *apptest.Server) notify.Applier {
	gen := s.App.IDs
	anomalies := anomaly.NewRecorder(s.DB, gen)
	orders := order.NewService(s.DB, gen, outbox.NewWriter(gen), s.Config.OrderTTL)
	return payment.NewService(gen, orders, anomalies)
}

// reportPort returns a port like the instance's, on its guard and database, whose trade
// reports are applied by trades.
func reportPort(s *apptest.Server, trades notify.Applier) *notify.Port {
	secrets := map[string]string{}
	for _, ch := range s.Config.Channels {
		secrets[ch.Name] = ch.Secret
	}
	return notify.New(notify.Config{
		Guard: s.App.Guard, DB: s.DB, Anomalies: anomaly.NewRecorder(s.DB, s.App.IDs), Secrets: secrets,
		Tolerance: s.Config.SignatureTolerance, KafkaWindow: s.Config.MaxRedeliveryWindow,
	}, map[notify.Kind]notify.Applier{notify.Trade: trades})
}

// errUnreachable is the failure of flakyPayments: one that may pass, so it is retried.
var errUnreachable = errors.New("database unreachable (test)")

// flakyPayments applies trade reports through next, except that its first fails attempts at
// the trade failing fail with errUnreachable, nothing applied. It records every attempt's trade
// number in order.
type flakyPayments struct {
	next    notify.Applier
	failing string
	fails   int

	mu       sync.Mutex
	attempts []string
}

// Apply implements notify.Applier.
func (f *flakyPayments) Apply(ctx context.Context, tx *gorm.DB, r notify.Report, record func(notify.Outcome) error) (notify.Outcome, error) {
	f.mu.Lock()
	f.attempts = append(f.attempts, r.Number)
	fail := r.Number == f.failing && f.fails > 0
	if fail {
		f.fails--
	}
	f.mu.Unlock()
	if fail {
		return 0, errUnreachable
	}
	return f.next.Apply(ctx, tx, r, record)
}

// stopFailing makes every later attempt apply.
func (f *flakyPayments) stopFailing() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fails = 0
}

// applied returns the trade numbers of every attempt so far, in order.
func (f *flakyPayments) applied() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.attempts)
}

// dialGate opens a consumer's connections to the broker, or refuses them while it is closed.
type dialGate struct {
	mu     sync.Mutex
	closed bool
}

func (g *dialGate) dial(ctx context.Context, network, address string) (net.Conn, error) {
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if closed {
		return nil, errors.New("dialGate: the broker is unreachable")
	}
	return (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, address)
}

func (g *dialGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = false
}

// logCounter is a default logger that counts records by message and keeps the "attempt" of
// each, passing warnings on to stderr.
type logCounter struct {
	next slog.Handler

	mu      sync.Mutex
	counts  map[string]int
	attempt map[string][]int64
}

// captureLogs makes a logCounter the default logger until the test ends.
func captureLogs(t *testing.T) *logCounter {
	t.Helper()
	h := &logCounter{
		next:    slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}),
		counts:  map[string]int{},
		attempt: map[string][]int64{},
	}
	previous := slog.Default()
	slog.SetDefault(slog.New(h))
	t.Cleanup(func() { slog.SetDefault(previous) })
	return h
}

func (h *logCounter) Enabled(context.Context, slog.Level) bool { return true }

func (h *logCounter) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	h.counts[r.Message]++
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "attempt" {
			h.attempt[r.Message] = append(h.attempt[r.Message], a.Value.Int64())
		}
		return true
	})
	h.mu.Unlock()
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

// WithAttrs and WithGroup keep h: the consumer logs through the default logger directly.
func (h *logCounter) WithAttrs([]slog.Attr) slog.Handler { return h }

func (h *logCounter) WithGroup(string) slog.Handler { return h }

// count returns how many records had message msg.
func (h *logCounter) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counts[msg]
}

// attempts returns the "attempt" of every record with message msg, in order.
func (h *logCounter) attempts(msg string) []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.attempt[msg])
}
