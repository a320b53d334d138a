package webhook_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/webhook"
)

// TestFanOutLeavesTheCounterFree: 200 endpoints and 200 events make 40,000 deliveries. The
// sequence counter's row lock, which every sequencing transaction of every instance waits
// for, must be held for the seqs alone, not for the fan-out: a prober taking the lock beside
// the sequencer never waits long. Then every event has its 200 deliveries. MySQL only: SQLite
// serialises every write transaction anyway.
func TestFanOutLeavesTheCounterFree(t *testing.T) {
	if testing.Short() {
		t.Skip("40,000 deliveries: not in -short")
	}
	f := newFixture(t)
	if database.DialectOf(f.db) != database.MySQL {
		t.Skip("the counter's lock is a MySQL row lock")
	}
	const endpoints, events = 200, 200
	for range endpoints {
		f.endpoint(t, "http://127.0.0.1:9/hook", outbox.OrderPaid)
	}
	for i := range events {
		f.announce(t, outbox.OrderPaid, map[string]int{"n": i})
	}
	ctx := context.Background()
	var stop atomic.Bool
	var worst time.Duration
	var wg sync.WaitGroup
	wg.Go(func() {
		for !stop.Load() {
			start := time.Now()
			err := f.db.Transaction(func(tx *gorm.DB) error {
				var next int64
				return database.ForUpdate(tx.Table("event_sequence")).Select("next_seq").Where("name = ?", "events").Scan(&next).Error
			})
			if err != nil {
				t.Error(err)
				return
			}
			worst = max(worst, time.Since(start))
			time.Sleep(2 * time.Millisecond)
		}
	})
	start := time.Now()
	seq := webhook.NewSequencer(f.db, f.gen)
	total := 0
	for {
		n, err := seq.Sequence(ctx)
		if err != nil {
			t.Fatal(err)
		}
		total += n
		if n == 0 {
			break
		}
	}
	took := time.Since(start)
	stop.Store(true)
	wg.Wait()
	var deliveries int64
	f.db.Model(&webhook.Delivery{}).Count(&deliveries)
	t.Logf("%d events × %d endpoints: sequenced and fanned out in %v; the counter's lock kept a prober waiting at most %v", total, endpoints, took, worst)
	if total != events || deliveries != endpoints*events {
		t.Fatalf("%d events sequenced, %d deliveries, want %d and %d", total, deliveries, events, endpoints*events)
	}
	if worst > 300*time.Millisecond {
		t.Errorf("a prober waited %v for the sequence counter, want ≤ 300 ms: the fan-out ran under its lock", worst)
	}
}
