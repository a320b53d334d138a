package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
	"github.com/oncepay/oncepay/internal/webhook"
)

// reader replays the feed from a cursor, as a merchant's poller does.
type reader struct {
	feed   *webhook.Feed
	cursor int64
	next   string
	seen   []string
}

func (r *reader) poll(t *testing.T) {
	t.Helper()
	for {
		var after int64
		if r.next != "" {
			after = decodeForTest(t, r.next)
		}
		p, err := r.feed.List(context.Background(), after, nil, 7)
		if err != nil {
			t.Fatal(err)
		}
		for _, raw := range p.Events {
			var e outbox.Envelope
			if err := json.Unmarshal(raw, &e); err != nil {
				t.Fatal(err)
			}
			r.seen = append(r.seen, e.EventID)
		}
		r.next = p.NextCursor
		if !p.HasMore {
			return
		}
	}
}

// decodeForTest reads a cursor back through the handler's own parser, by a page request.
func decodeForTest(t *testing.T, c string) int64 {
	t.Helper()
	n, err := webhook.DecodeEventCursor(c)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFeedCursorSurvivesALateCommit is the case a cursor on ids gets wrong: an event whose
// transaction took its id first commits last. A reader that pages by id has moved past it and
// never sees it; the feed, ordered by the seq the sequencer gives after the commit, shows it
// next.
func TestFeedCursorSurvivesALateCommit(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	feed := webhook.NewFeed(f.db)

	slow := f.db.Begin()
	early, err := f.events.Notice(ctx, f.gen.Next(), outbox.OrderPaid, map[string]string{"order": "slow"})
	if err != nil {
		t.Fatal(err)
	}
	if err := slow.Create(early).Error; err != nil {
		t.Fatal(err)
	}
	// SQLite has one writer: the quick transaction could not commit while the slow one is
	// open, so there the slow one commits first and only the MySQL run shows the race.
	if !testenv.UsingMySQL() {
		if err := slow.Commit().Error; err != nil {
			t.Fatal(err)
		}
	}
	late := f.announce(t, outbox.OrderPaid, map[string]string{"order": "quick"})
	if early.ID >= late {
		t.Fatalf("ids %d, %d: the slow transaction's id should be the smaller", early.ID, late)
	}

	// The naive reader: committed events by id, after the largest id it has seen.
	var byID []int64
	f.db.Model(&outbox.Event{}).Where("id > ?", 0).Order("id").Pluck("id", &byID)
	lastID := byID[len(byID)-1]

	f.sequence(t)
	r := &reader{feed: feed}
	r.poll(t)
	if testenv.UsingMySQL() {
		if err := slow.Commit().Error; err != nil {
			t.Fatal(err)
		}
	}
	f.sequence(t)
	r.poll(t)

	var naive []int64
	f.db.Model(&outbox.Event{}).Where("id > ?", lastID).Order("id").Pluck("id", &naive)
	if testenv.UsingMySQL() && len(naive) != 0 {
		t.Errorf("the id cursor saw %v after the late commit; the race did not happen", naive)
	}
	want := map[string]bool{ids.Format(early.ID): true, ids.Format(late): true}
	if len(r.seen) != 2 || !want[r.seen[0]] || !want[r.seen[1]] || r.seen[0] == r.seen[1] {
		t.Errorf("the feed showed %v, want both events once", r.seen)
	}
}

// TestFeedWithConcurrentWriters: writers commit and roll back events at random pace while two
// sequencers (two instances) run and a reader replays the feed from its cursor the whole
// time. The reader ends with every committed event exactly once, none of the rolled-back
// ones, and the feed's order is the order the reader saw.
func TestFeedWithConcurrentWriters(t *testing.T) {
	testenv.RequireMySQL(t)
	f := newFixture(t)
	const writers, each = 8, 25

	var mu sync.Mutex
	committed := map[string]bool{}
	rolledBack := map[string]bool{}
	errRollback := errors.New("rolled back")
	ctx, cancel := context.WithCancel(context.Background())
	var seqs sync.WaitGroup
	for range 2 {
		seq := webhook.NewSequencer(apptest.OpenPool(t, f.db, f.dsn), f.gen)
		seq.BatchSize = 5
		seqs.Go(func() {
			for ctx.Err() == nil {
				if _, err := seq.Sequence(ctx); err != nil && ctx.Err() == nil {
					t.Errorf("sequence: %v", err)
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	r := &reader{feed: webhook.NewFeed(f.db)}
	stopReading := make(chan struct{})
	var reading sync.WaitGroup
	reading.Go(func() {
		for {
			select {
			case <-stopReading:
				return
			default:
			}
			r.poll(t)
			time.Sleep(2 * time.Millisecond)
		}
	})

	var wg sync.WaitGroup
	pool := apptest.OpenPool(t, f.db, f.dsn)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				var id string
				err := pool.Transaction(func(tx *gorm.DB) error {
					ev, err := f.events.Notice(ctx, f.gen.Next(), outbox.OrderPaid, map[string]int{"w": w, "i": i})
					if err != nil {
						return err
					}
					id = ids.Format(ev.ID)
					if err := tx.Create(ev).Error; err != nil {
						return err
					}
					time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
					if i%5 == 4 {
						return errRollback
					}
					return nil
				})
				mu.Lock()
				switch {
				case err == nil:
					committed[id] = true
				case errors.Is(err, errRollback):
					rolledBack[id] = true
				default:
					t.Errorf("writer: %v", err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	apptest.Eventually(t, 30*time.Second, "every committed event sequenced", func() (bool, string) {
		var n int64
		f.db.Model(&outbox.Event{}).Where("seq IS NULL").Count(&n)
		return n == 0, fmt.Sprintf("%d without seq", n)
	})
	cancel()
	seqs.Wait()
	close(stopReading)
	reading.Wait()
	r.poll(t)

	seen := map[string]int{}
	for _, id := range r.seen {
		seen[id]++
		if rolledBack[id] {
			t.Errorf("the reader saw rolled-back event %s", id)
		}
	}
	for id := range committed {
		if seen[id] != 1 {
			t.Errorf("committed event %s seen %d times, want once", id, seen[id])
		}
	}
	if len(r.seen) != len(committed) {
		t.Errorf("the reader saw %d events, want the %d committed", len(r.seen), len(committed))
	}
	var order []int64
	f.db.Model(&outbox.Event{}).Order("seq").Pluck("id", &order)
	for i, id := range order {
		if i < len(r.seen) && ids.Format(id) != r.seen[i] {
			t.Fatalf("feed position %d is %d, the reader saw %s there", i, id, r.seen[i])
		}
	}
}
