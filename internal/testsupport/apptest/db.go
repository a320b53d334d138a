package apptest

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/inventory"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
)

// Inventory reads sku's stock from the database.
func (s *Server) Inventory(tb testing.TB, sku string) inventory.Item {
	tb.Helper()
	it, err := inventory.NewStore(s.DB).Get(context.Background(), sku)
	if err != nil {
		tb.Fatalf("inventory %s: %v", sku, err)
	}
	return it
}

// Order reads order id (its API form) with its items from the database.
func (s *Server) Order(tb testing.TB, id string) order.Order {
	tb.Helper()
	n, ok := ids.Parse(id)
	if !ok {
		tb.Fatalf("order id %q is not a snowflake", id)
	}
	o, err := order.Store{}.Get(context.Background(), s.DB, n)
	if err != nil {
		tb.Fatalf("order %s: %v", id, err)
	}
	return o
}

// WaitExpired waits until every order of orderIDs (their API form) is past its expires_at by the
// database's clock, the one the close job judges expiry by (order.Service.ExpiredIDs, Close).
// A test that runs the job must wait for the last of its orders to expire, not for one it
// picked: orders placed one after another expire one after another, and on a loaded machine
// the requests between two of them can take longer than any margin added to the first.
func (s *Server) WaitExpired(tb testing.TB, orderIDs ...string) {
	tb.Helper()
	var last time.Time
	for _, id := range orderIDs {
		if e := s.Order(tb, id).ExpiresAt; e.After(last) {
			last = e
		}
	}
	time.Sleep(time.Until(last)) // most of the wait on this clock; the database's has the last word
	Eventually(tb, 10*time.Second, "orders expired by the database's clock", func() (bool, string) {
		now, err := database.Now(context.Background(), s.DB)
		if err != nil {
			return false, err.Error()
		}
		return now.After(last), "database clock " + now.Format(time.RFC3339Nano) + ", last expiry " + last.Format(time.RFC3339Nano)
	})
}

// Count returns the number of rows of table matching where (all rows when where is "").
func (s *Server) Count(tb testing.TB, table, where string, args ...any) int64 {
	tb.Helper()
	q := s.DB.Table(table)
	if where != "" {
		q = q.Where(where, args...)
	}
	var n int64
	if err := q.Count(&n).Error; err != nil {
		tb.Fatalf("count %s where %s: %v", table, where, err)
	}
	return n
}

// OutboxEvent is an outbox row with its decoded payload.
type OutboxEvent struct {
	order.Event
	ID          int64
	Attempts    int
	PublishedAt *time.Time
}

// OutboxEvents returns the outbox rows of orderID in id order, all of them when orderID is "".
func (s *Server) OutboxEvents(tb testing.TB, orderID string) []OutboxEvent {
	tb.Helper()
	q := s.DB.Model(&outbox.Message{}).Order("id")
	if orderID != "" {
		q = q.Where("msg_key = ?", orderID)
	}
	var rows []outbox.Message
	if err := q.Find(&rows).Error; err != nil {
		tb.Fatalf("read outbox: %v", err)
	}
	out := make([]OutboxEvent, len(rows))
	for i, m := range rows {
		out[i] = OutboxEvent{ID: m.ID, Attempts: m.Attempts, PublishedAt: m.PublishedAt}
		if err := json.Unmarshal(m.Payload, &out[i].Event); err != nil {
			tb.Fatalf("outbox row %d: payload %q: %v", m.ID, m.Payload, err)
		}
	}
	return out
}

// CountEvents counts the events of type typ among evs.
func CountEvents[E interface{ EventType() string }](evs []E, typ string) int {
	n := 0
	for _, e := range evs {
		if e.EventType() == typ {
			n++
		}
	}
	return n
}

// EventType is the event's type, for CountEvents.
func (e OutboxEvent) EventType() string { return e.Type }

// WaitOutboxPublished waits until the relay has published every outbox row.
func (s *Server) WaitOutboxPublished(tb testing.TB) {
	tb.Helper()
	Eventually(tb, 20*time.Second, "outbox drained by the relay", func() (bool, string) {
		n := s.Count(tb, "outbox", "published_at IS NULL")
		return n == 0, describe(n) + " rows unpublished"
	})
}

// Tables are the tables a Snapshot counts.
var Tables = []string{"orders", "order_items", "payments", "inventory_movements", "idempotency_records", "anomalies", "outbox"}

// Snapshot is the business state of the database in numbers: the row count of every table in
// Tables ("orders": 3) and every SKU's stock ("SKU-1001.available": 97).
type Snapshot map[string]int64

// Snapshot takes a Snapshot of the database.
func (s *Server) Snapshot(tb testing.TB) Snapshot {
	tb.Helper()
	snap := Snapshot{}
	for _, t := range Tables {
		snap[t] = s.Count(tb, t, "")
	}
	var items []inventory.Item
	if err := s.DB.Order("sku").Find(&items).Error; err != nil {
		tb.Fatalf("read inventory: %v", err)
	}
	for _, it := range items {
		snap[it.SKU+".available"] = it.Available
		snap[it.SKU+".reserved"] = it.Reserved
		snap[it.SKU+".sold"] = it.Sold
	}
	return snap
}

// Diff returns what changed from s to later: each key whose value differs, with the change.
func (s Snapshot) Diff(later Snapshot) map[string]int64 {
	d := map[string]int64{}
	for _, k := range slices.Sorted(maps.Keys(later)) {
		if later[k] != s[k] {
			d[k] = later[k] - s[k]
		}
	}
	for k, v := range s {
		if _, ok := later[k]; !ok {
			d[k] = -v
		}
	}
	return d
}

// String renders a diff or snapshot in a stable order.
func (s Snapshot) String() string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(s)) {
		b.WriteString(k + "=" + describe(s[k]) + " ")
	}
	return strings.TrimSpace(b.String())
}
