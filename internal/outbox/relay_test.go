package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/ids"
	kafkax "github.com/oncepay/oncepay/internal/platform/kafka"
	"github.com/oncepay/oncepay/internal/platform/requestid"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// noLock is a Locker that always holds the lock, for relays driven by hand.
func noLock(ctx context.Context, _ string, fn func(ctx context.Context) error) (bool, error) {
	return true, fn(ctx)
}

// pending counts the outbox rows not yet published.
func pending(t *testing.T, s *apptest.Server) int64 {
	t.Helper()
	return s.Count(t, "outbox", "published_at IS NULL")
}

// TestRelayRestart drives the relay by hand on an instance whose own relay does not run. State
// changes pile up in the outbox; a first relay publishes one batch and stops; more changes
// arrive; a crash between publish and mark is simulated by un-marking two published rows; a new
// relay publishes the rest. Every outbox row reaches order.events at least once, under its
// event_id, and a consumer that deduplicates by event_id sees every state change exactly once,
// in order per order.
func TestRelayRestart(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Kafka)
	w := s.Writer(t)

	var orders []string
	for i := range 5 {
		o := s.CreateOrder(t, apptest.AliceKey, apptest.Key("relay", i), apptest.Item{SKU: "SKU-1002", Quantity: 1})
		orders = append(orders, o.OrderID)
		if i%2 == 0 {
			apptest.Must(t, s.SignedNotify(apptest.JSON(apptest.Notification(o, "alipay", "T-"+o.OrderID))), http.StatusOK)
		}
	}
	apptest.Must(t, s.Do(http.MethodPost, "/v1/orders/"+orders[1]+"/cancel", apptest.AliceKey, nil, apptest.IdemKey("c1")), http.StatusOK)
	if n := pending(t, s); n != 9 { // 5 created, 3 paid, 1 cancelled
		t.Fatalf("outbox holds %d pending rows, want 9", n)
	}

	first := outbox.NewRelay(s.DB, w, noLock)
	first.BatchSize = 4
	if n, err := first.PublishBatch(context.Background()); n != 4 || err != nil {
		t.Fatalf("first relay published %d (err %v), want one batch of 4", n, err)
	}
	if n := pending(t, s); n != 5 {
		t.Fatalf("%d rows pending after one batch, want 5", n)
	}

	// The first relay is gone. More changes arrive while no relay runs.
	late := s.CreateOrder(t, apptest.BobKey, "relay-late", apptest.Item{SKU: "SKU-1001", Quantity: 1})
	orders = append(orders, late.OrderID)
	apptest.Must(t, s.Do(http.MethodPost, "/v1/orders/"+late.OrderID+"/cancel", apptest.BobKey, nil, apptest.IdemKey("c2")), http.StatusOK)

	// A relay that crashed after publishing but before marking: its rows are pending again.
	var republish []int64
	if err := s.DB.Model(&outbox.Message{}).Where("published_at IS NOT NULL").Order("id").Limit(2).Pluck("id", &republish).Error; err != nil {
		t.Fatal(err)
	}
	if err := s.DB.Model(&outbox.Message{}).Where("id IN ?", republish).Update("published_at", nil).Error; err != nil {
		t.Fatal(err)
	}

	second := outbox.NewRelay(s.DB, w, noLock)
	second.BatchSize = 4
	second.Interval = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := second.Run(ctx); err != nil {
			t.Errorf("relay Run: %v", err)
		}
	})
	apptest.Eventually(t, 20*time.Second, "the second relay drains the outbox", func() (bool, string) {
		n := pending(t, s)
		return n == 0, fmt.Sprintf("%d pending", n)
	})
	cancel()
	wg.Wait()

	rows := s.OutboxEvents(t, "")
	if len(rows) != 11 { // the 9 above, the late order and its cancel
		t.Fatalf("outbox holds %d rows, want 11", len(rows))
	}
	msgs := s.Messages(t, kafkax.TopicOrderEvents)
	if len(msgs) != len(rows)+len(republish) {
		t.Errorf("order.events holds %d messages, want %d (every row once, the two un-marked ones twice)", len(msgs), len(rows)+len(republish))
	}

	// The consumer's view: deduplicate by event_id, keep the order of each partition.
	seen := map[string]bool{}
	perOrder := map[string][]string{}
	for _, m := range msgs {
		e := decode(t, m)
		if !seen[e.EventID] {
			seen[e.EventID] = true
			perOrder[e.OrderID] = append(perOrder[e.OrderID], e.Type)
		}
	}
	for _, r := range rows {
		if !seen[strconv.FormatInt(r.ID, 10)] {
			t.Errorf("outbox row %d (%s of %s) never reached order.events", r.ID, r.Type, r.OrderID)
		}
	}
	if len(seen) != len(rows) {
		t.Errorf("the deduplicating consumer saw %d distinct events, want %d", len(seen), len(rows))
	}
	for _, id := range orders {
		var want []string
		for _, r := range rows {
			if r.OrderID == id {
				want = append(want, r.Type)
			}
		}
		if got := perOrder[id]; !slices.Equal(got, want) {
			t.Errorf("order %s: consumer saw %v, want the changes in order %v", id, got, want)
		}
	}
}

// decodedEvent is the part of an order.events message the relay test reads.
type decodedEvent struct {
	EventID, Type, OrderID string
}

// decode reads m's event and checks that the relay kept its envelope: the event_id header is
// the payload's event_id, and the key is the order id.
func decode(t *testing.T, m kafka.Message) decodedEvent {
	t.Helper()
	var e struct {
		EventID string `json:"event_id"`
		Type    string `json:"type"`
		OrderID string `json:"order_id"`
	}
	if err := json.Unmarshal(m.Value, &e); err != nil {
		t.Fatalf("order.events offset %d: %v", m.Offset, err)
	}
	if h := apptest.Header(m, "event_id"); h != e.EventID {
		t.Errorf("event_id header %q, payload %q", h, e.EventID)
	}
	if string(m.Key) != e.OrderID {
		t.Errorf("message key %q, want the order id %s", m.Key, e.OrderID)
	}
	return decodedEvent{EventID: e.EventID, Type: e.Type, OrderID: e.OrderID}
}

// failingPublisher refuses every write; okPublisher records them.
type (
	failingPublisher struct{}
	okPublisher      struct {
		mu   sync.Mutex
		msgs []kafka.Message
	}
)

var errBrokerDown = errors.New("broker down")

func (failingPublisher) WriteMessages(context.Context, ...kafka.Message) error { return errBrokerDown }

func (p *okPublisher) WriteMessages(_ context.Context, msgs ...kafka.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.msgs = append(p.msgs, msgs...)
	return nil
}

// outboxDB is a fresh database with three events written by an outbox.Writer.
func outboxDB(t *testing.T) (*gorm.DB, []int64) {
	t.Helper()
	db := testenv.DB(t)
	gen, err := ids.New(7)
	if err != nil {
		t.Fatal(err)
	}
	w := outbox.NewWriter(gen)
	var got []int64
	for i := range 3 {
		ctx := requestid.With(context.Background(), "req-"+strconv.Itoa(i))
		err := w.Add(ctx, db, kafkax.TopicOrderEvents, "key-"+strconv.Itoa(i), func(id int64) any {
			got = append(got, id)
			return map[string]string{"event_id": strconv.FormatInt(id, 10)}
		})
		if err != nil {
			t.Fatalf("add: %v", err)
		}
	}
	return db, got
}

// rowsOf reads the outbox rows of db in id order.
func rowsOf(t *testing.T, db *gorm.DB) []outbox.Message {
	t.Helper()
	var rows []outbox.Message
	if err := db.Order("id").Find(&rows).Error; err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestPublishFailure: when Kafka refuses a batch, the rows stay pending with one more attempt
// each, and nothing is lost: the next successful batch publishes them all, with their key,
// request id and event_id.
func TestPublishFailure(t *testing.T) {
	db, eventIDs := outboxDB(t)

	broken := outbox.NewRelay(db, failingPublisher{}, noLock)
	for attempt := 1; attempt <= 2; attempt++ {
		n, err := broken.PublishBatch(context.Background())
		if !errors.Is(err, errBrokerDown) || n != 0 {
			t.Fatalf("attempt %d: published %d, err %v; want 0 and the broker's error", attempt, n, err)
		}
		for _, r := range rowsOf(t, db) {
			if r.PublishedAt != nil || r.Attempts != attempt {
				t.Errorf("attempt %d: row %d published_at %v attempts %d, want pending with %d attempts", attempt, r.ID, r.PublishedAt, r.Attempts, attempt)
			}
		}
	}

	pub := &okPublisher{}
	relay := outbox.NewRelay(db, pub, noLock)
	relay.BatchSize = 2
	if n, err := relay.PublishBatch(context.Background()); n != 2 || err != nil {
		t.Fatalf("published %d (err %v), want a batch of 2", n, err)
	}
	if n, err := relay.PublishBatch(context.Background()); n != 1 || err != nil {
		t.Fatalf("published %d (err %v), want the last 1", n, err)
	}
	if n, err := relay.PublishBatch(context.Background()); n != 0 || err != nil {
		t.Fatalf("published %d (err %v) from an empty outbox, want 0", n, err)
	}
	if len(pub.msgs) != len(eventIDs) {
		t.Fatalf("publisher got %d messages, want %d", len(pub.msgs), len(eventIDs))
	}
	for i, m := range pub.msgs {
		want := strconv.FormatInt(eventIDs[i], 10)
		if m.Topic != kafkax.TopicOrderEvents || string(m.Key) != "key-"+strconv.Itoa(i) ||
			apptest.Header(m, "event_id") != want || apptest.Header(m, kafkax.HeaderRequestID) != "req-"+strconv.Itoa(i) {
			t.Errorf("message %d: topic %s key %s headers %v, want %s key-%d event_id %s req-%d", i, m.Topic, m.Key, m.Headers, kafkax.TopicOrderEvents, i, want, i)
		}
	}
	for _, r := range rowsOf(t, db) {
		if r.PublishedAt == nil || r.Attempts != 2 {
			t.Errorf("row %d: published_at %v attempts %d, want published with the 2 failed attempts kept", r.ID, r.PublishedAt, r.Attempts)
		}
	}
}

// TestAddRollsBack: an event belongs to its transaction — a rolled-back change leaves no row
// to publish, a committed one leaves exactly its row.
func TestAddRollsBack(t *testing.T) {
	db := testenv.DB(t)
	gen, err := ids.New(8)
	if err != nil {
		t.Fatal(err)
	}
	w := outbox.NewWriter(gen)
	add := func(ctx context.Context, tx *gorm.DB) error {
		return w.Add(ctx, tx, kafkax.TopicOrderEvents, "k", func(id int64) any { return map[string]int64{"event_id": id} })
	}
	errChange := errors.New("the business change failed")
	err = db.Transaction(func(tx *gorm.DB) error {
		if err := add(context.Background(), tx); err != nil {
			return err
		}
		return errChange
	})
	if !errors.Is(err, errChange) {
		t.Fatalf("transaction: %v, want the change's error", err)
	}
	if n := len(rowsOf(t, db)); n != 0 {
		t.Fatalf("%d outbox rows after a rollback, want 0", n)
	}
	if err := db.Transaction(func(tx *gorm.DB) error { return add(context.Background(), tx) }); err != nil {
		t.Fatal(err)
	}
	if n := len(rowsOf(t, db)); n != 1 {
		t.Fatalf("%d outbox rows after a commit, want 1", n)
	}
}
