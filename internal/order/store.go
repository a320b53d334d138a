package order

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/platform/database"
)

// Store reads and writes orders. Writes take the transaction they belong to; reads take the
// connection to read from (a transaction, or the pool).
type Store struct {
	// localLocks lets Lock be a locking read instead of a write: on one server, where a row
	// lock is the whole server's. The zero value writes, which is correct on every server
	// (Lock).
	localLocks bool
}

// Get returns order id with its items, or ErrNotFound.
func (Store) Get(ctx context.Context, db *gorm.DB, id int64) (Order, error) {
	return get(ctx, db, id, false)
}

// Current returns order id as it is now, with a locking read inside tx: the answer to "why
// did my conditional UPDATE affect 0 rows?" (see database.ForUpdate).
func (Store) Current(ctx context.Context, tx *gorm.DB, id int64) (Order, error) {
	return get(ctx, tx, id, true)
}

func get(ctx context.Context, db *gorm.DB, id int64, current bool) (Order, error) {
	conn := db.WithContext(ctx)
	q := conn
	if current {
		q = database.ForUpdate(conn)
	}
	var o Order
	err := q.Where("id = ?", id).Take(&o).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Order{}, ErrNotFound
	}
	if err != nil {
		return Order{}, err
	}
	err = conn.Where("order_id = ?", id).Order("sku").Find(&o.Items).Error
	return o, err
}

// Lock takes order id's row lock in tx before a decision that depends on the order — a
// refund counted against what was paid, a refund that completes the order, a trade opened on
// it — or reports ErrNotFound.
//
// On one MySQL server it is a locking read (SELECT … FOR UPDATE), which changes nothing: a
// duplicate report that finds its decision taken leaves the order as it was (the fences of
// docs/incidents.md, I13, compare every row). On a MariaDB Galera cluster (no localLocks) it is a
// write — updated_at moves on by a microsecond at least — because a locking read there locks
// the row on its own node only and is never certified: two transactions on two nodes that each
// lock the order and then decide both commit — write skew: two partial refunds reported at once
// on two nodes each counted only itself and left a refunded order PAID (found by the chaos run
// on Galera). A written row is in the write set: the second to commit loses certification
// (1213), and the guard runs it again, now seeing the first. SQLite serializes write
// transactions already: there it only checks that the order exists.
func (st Store) Lock(ctx context.Context, tx *gorm.DB, id int64) error {
	tx = tx.WithContext(ctx)
	if database.DialectOf(tx) == database.MySQL && !st.localLocks {
		// The database's clock: a closed order's updated_at is its close time by that clock
		// (Service.Close), which a lock on an instance whose clock runs behind must not move
		// back, nor one ahead push minutes into the future.
		res := tx.Exec("UPDATE orders SET updated_at = GREATEST(updated_at + INTERVAL 1 MICROSECOND, UTC_TIMESTAMP(6)) WHERE id = ?", id)
		switch {
		case res.Error != nil:
			return res.Error
		case res.RowsAffected == 0:
			return ErrNotFound
		}
		return nil
	}
	var found struct{ ID int64 }
	err := database.ForUpdate(tx).Model(&Order{}).Select("id").Where("id = ?", id).Take(&found).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return ErrNotFound
	}
	return err
}

// Transition moves order id to status to, provided its current status is one of From(to),
// and sets the extra columns, in tx. It reports whether the order moved: false means it had
// already moved on, which callers treat as an answer, never as an error to retry blindly.
// This conditional UPDATE is the defense against I5 (a late close task closed a paid order)
// and against a late copy of a payment moving a status backwards (I1).
func (Store) Transition(ctx context.Context, tx *gorm.DB, id int64, to Status, set map[string]any) (bool, error) {
	cols := map[string]any{"status": to, "updated_at": clock.Now()}
	for k, v := range set {
		cols[k] = v
	}
	tx = tx.WithContext(ctx)
	// Lock the row by primary key first. With few PENDING orders, MySQL may plan the UPDATE
	// below as a range scan of idx_orders_status_expires, whose next-key locks let two
	// transitions of one order deadlock. This read only locks; the UPDATE still decides.
	var locked struct{ ID int64 }
	if err := database.ForUpdate(tx).Model(&Order{}).Select("id").Where("id = ?", id).Take(&locked).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return false, nil
		}
		return false, err
	}
	res := tx.Model(&Order{}).
		Where("id = ? AND status IN ?", id, From(to)).
		Updates(cols)
	return res.RowsAffected == 1, res.Error
}

// TransitionIn adds to b the conditional UPDATE that moves order id to status to, provided its
// current status is one of From(to), with the columns of set: the planned form of
// Transition, for a use case that decided from a plain read and placed its record before
// this contended row. An order that moved on since the read fails the batch with
// idempotent.ErrStale, and the guard runs the transaction again. The primary key is forced on
// MySQL: with few PENDING orders the optimizer may otherwise scan idx_orders_status_expires,
// whose next-key locks let two transitions of one order deadlock.
func (Store) TransitionIn(ctx context.Context, b *database.Batch, id int64, to Status, set map[string]any) {
	cols := slices.Sorted(maps.Keys(set))
	var sql strings.Builder
	sql.WriteString("UPDATE orders")
	if b.Dialect() == database.MySQL {
		sql.WriteString(" FORCE INDEX (PRIMARY)")
	}
	sql.WriteString(" SET status = ?")
	vars := []any{string(to)}
	for _, c := range cols {
		sql.WriteString(", " + c + " = ?")
		vars = append(vars, set[c])
	}
	from := From(to)
	sql.WriteString(" WHERE id = ? AND status IN (?" + strings.Repeat(", ?", len(from)-1) + ")")
	vars = append(vars, id)
	for _, f := range from {
		vars = append(vars, string(f))
	}
	b.Update(ctx, fmt.Errorf("order %d: %w", id, idempotent.ErrStale), sql.String(), vars...)
}

// ExpiredIDs returns up to limit ids of unpaid orders whose expires_at has passed.
func (Store) ExpiredIDs(ctx context.Context, db *gorm.DB, now time.Time, limit int) ([]int64, error) {
	var ids []int64
	err := db.WithContext(ctx).Model(&Order{}).
		Where("status = ? AND expires_at <= ?", PendingPayment, now).
		Order("expires_at").Limit(limit).Pluck("id", &ids).Error
	return ids, err
}
