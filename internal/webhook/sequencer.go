package webhook

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
)

// Sequencer places committed events in the feed and, after that, fans each out to the
// endpoints subscribed to its type.
//
// An event's id is taken before its transaction commits, so ids are not commit order: an
// event of a slow transaction can commit after a later id was already served, and a cursor on
// ids would skip it for good. Seq is given after the commit instead, in a transaction that
// first locks the one event_sequence row: two sequencing transactions — of one instance or of
// several — take turns on that row, so a seq is committed only after every smaller seq, and a
// reader that has seen seq S can never be shown a smaller one later. The events API serves
// sequenced events only.
type Sequencer struct {
	db  *gorm.DB
	ids *ids.Generator
	// BatchSize is the most events one transaction sequences.
	BatchSize int
	// Metrics observes each event's delay into the feed; nil observes nothing.
	Metrics *Metrics
}

// NewSequencer returns the sequencer on db.
func NewSequencer(db *gorm.DB, gen *ids.Generator) *Sequencer {
	return &Sequencer{db: db, ids: gen, BatchSize: 500}
}

// pendingEvent is the part of an event the sequencer reads.
type pendingEvent struct {
	ID        int64
	Type      string
	CreatedAt time.Time
}

// Sequence gives the committed events without a seq theirs, oldest id first, in one
// transaction, then creates the deliveries of every event sequenced so far that has none yet
// (fanOut); it returns how many it sequenced.
func (s *Sequencer) Sequence(ctx context.Context) (int, error) {
	n, err := s.sequence(ctx)
	if err != nil {
		return n, err
	}
	for {
		more, err := s.fanOut(ctx)
		if err != nil || !more {
			return n, err
		}
	}
}

// sequence is the counter's transaction: the seqs alone, nothing that grows with the
// endpoints, since every sequencing transaction of every instance waits for its lock.
func (s *Sequencer) sequence(ctx context.Context) (int, error) {
	var n int
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		// 1. The counter's row lock: sequencing transactions take turns from here.
		var next int64
		err := database.ForUpdate(tx.Table("event_sequence")).Select("next_seq").Where("name = ?", "events").Scan(&next).Error
		if err != nil {
			return err
		}
		// 2. The events committed so far without a seq. On MySQL the transaction reads
		//    committed data, so this read, made after the lock was granted, sees every event
		//    that committed before it, and no other sequencer can be placing them now.
		var batch []pendingEvent
		err = tx.Model(&outbox.Event{}).Select("id, type, created_at").Where("seq IS NULL").Order("id").Limit(s.BatchSize).Scan(&batch).Error
		if err != nil || len(batch) == 0 {
			return err
		}
		// 3. Their seqs in one statement, and the counter moved past them.
		if err := assign(tx, batch, next); err != nil {
			return err
		}
		if err := tx.Table("event_sequence").Where("name = ?", "events").Update("next_seq", next+int64(len(batch))).Error; err != nil {
			return err
		}
		n = len(batch)
		now, err := database.Now(ctx, tx)
		if err != nil {
			return err
		}
		s.Metrics.sequenced(now, batch)
		return nil
	}, txOptions(s.db))
	return n, err
}

// txOptions reads committed data on MySQL (see Sequence); SQLite's transactions are
// serialized already and take no isolation level.
func txOptions(db *gorm.DB) *sql.TxOptions {
	if database.DialectOf(db) == database.MySQL {
		return &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	}
	return nil
}

// assign sets seq next, next+1, … on batch in one UPDATE (a CASE on the id).
func assign(tx *gorm.DB, batch []pendingEvent, next int64) error {
	var sb strings.Builder
	args := make([]any, 0, 2*len(batch)+1)
	ids := make([]int64, len(batch))
	sb.WriteString("UPDATE events SET seq = CASE id")
	for i, ev := range batch {
		sb.WriteString(" WHEN ? THEN ?")
		args = append(args, ev.ID, next+int64(i))
		ids[i] = ev.ID
	}
	sb.WriteString(" END WHERE seq IS NULL AND id IN ?")
	args = append(args, ids)
	res := tx.Exec(sb.String(), args...)
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected != int64(len(batch)) {
		// The counter's lock makes this unreachable: another sequencer placed some of them.
		return fmt.Errorf("sequencer: %d of %d events were sequenced meanwhile", int64(len(batch))-res.RowsAffected, len(batch))
	}
	return nil
}

// fanRows is about the most deliveries one fan-out transaction creates: its events are
// fanRows / endpoints, at least one, at most BatchSize.
const fanRows = 5000

// fanOut creates, in one transaction under the lock of the fan-out's own cursor row
// (event_sequence "fanout", the first seq not fanned out yet), the deliveries of the next
// sequenced events: one per event and endpoint that is not disabled and is subscribed to the
// event's type, due now. It moves the cursor past them and reports whether more events may be
// waiting. It runs after the counter's transaction, never inside it: with 200 endpoints the
// fan-out of 200 events (40,000 rows) held the counter 1.7 s, and every instance's sequencing
// waited for it. A fan-out cut short (a crash after the seqs committed) is simply done by the
// next one, from the cursor; the deliveries' unique key makes a repeat create nothing twice.
func (s *Sequencer) fanOut(ctx context.Context) (bool, error) {
	var more bool
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var from int64
		err := database.ForUpdate(tx.Table("event_sequence")).Select("next_seq").Where("name = ?", "fanout").Scan(&from).Error
		if err != nil {
			return err
		}
		var endpoints []Endpoint
		if err := tx.Where("status <> ?", Disabled).Find(&endpoints).Error; err != nil {
			return err
		}
		limit := min(max(1, fanRows/max(1, len(endpoints))), s.BatchSize)
		var batch []struct {
			ID   int64
			Type string
			Seq  int64
		}
		err = tx.Model(&outbox.Event{}).Select("id, type, seq").Where("seq >= ?", from).Order("seq").Limit(limit).Scan(&batch).Error
		if err != nil || len(batch) == 0 {
			return err
		}
		more = len(batch) == limit
		// Due now by the database's clock, which Sender.Claim compares with.
		now, err := database.Now(ctx, tx)
		if err != nil {
			return err
		}
		var rows []Delivery
		for _, ev := range batch {
			for _, e := range endpoints {
				if e.Subscribed(ev.Type) {
					rows = append(rows, Delivery{ID: s.ids.Next(), EndpointID: e.ID, EventID: ev.ID, Status: Pending,
						NextAttemptAt: now, CreatedAt: now, UpdatedAt: now})
				}
			}
		}
		if len(rows) > 0 {
			// 1,000 rows per INSERT: 11,000 placeholders, below SQLite's 32,766 and MySQL's 65,535.
			err := tx.Clauses(clause.OnConflict{DoNothing: true}).CreateInBatches(&rows, 1000).Error
			if err != nil {
				return err
			}
		}
		return tx.Table("event_sequence").Where("name = ?", "fanout").Update("next_seq", batch[len(batch)-1].Seq+1).Error
	}, txOptions(s.db))
	return more, err
}
