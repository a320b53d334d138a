package order

import (
	"context"
	"errors"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/platform/database"
)

// Store reads and writes orders inside the transaction ctx carries, if any.
type Store struct{ db *gorm.DB }

// NewStore returns the order store on db.
func NewStore(db *gorm.DB) *Store { return &Store{db: db} }

// Insert writes a new order and its items.
func (s *Store) Insert(ctx context.Context, o *Order) error {
	conn := database.Conn(ctx, s.db)
	if err := conn.Create(o).Error; err != nil {
		return err
	}
	return conn.Create(&o.Items).Error
}

// Get returns order id with its items, or ErrNotFound.
func (s *Store) Get(ctx context.Context, id int64) (Order, error) {
	return s.get(ctx, id, false)
}

// Current returns order id as it is now, with a locking read inside a transaction: the
// answer to "why did my conditional UPDATE affect 0 rows?" (see database.ForUpdate).
func (s *Store) Current(ctx context.Context, id int64) (Order, error) {
	return s.get(ctx, id, true)
}

func (s *Store) get(ctx context.Context, id int64, current bool) (Order, error) {
	conn := database.Conn(ctx, s.db)
	var o Order
	q := conn
	if current {
		q = database.ForUpdate(conn)
	}
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

// Transition moves order id to status to, provided its current status is one of From(to),
// and sets the extra columns. It reports whether the order moved: false means it had
// already moved on, which callers treat as an answer, never as an error to retry blindly.
func (s *Store) Transition(ctx context.Context, id int64, to Status, set map[string]any) (bool, error) {
	cols := map[string]any{"status": to, "updated_at": time.Now().UTC()}
	for k, v := range set {
		cols[k] = v
	}
	conn := database.Conn(ctx, s.db)
	// Lock the row by primary key first. With few PENDING orders, MySQL may plan the UPDATE
	// below as a range scan of idx_orders_status_expires, whose next-key locks let two
	// transitions of one order deadlock. This read only locks; the UPDATE still decides.
	var locked struct{ ID int64 }
	if err := database.ForUpdate(conn).Model(&Order{}).Select("id").Where("id = ?", id).Take(&locked).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return false, nil
		}
		return false, database.Translate(err)
	}
	res := conn.Model(&Order{}).
		Where("id = ? AND status IN ?", id, From(to)).
		Updates(cols)
	return res.RowsAffected == 1, database.Translate(res.Error)
}

// ExpiredIDs returns up to limit ids of unpaid orders whose expires_at has passed.
func (s *Store) ExpiredIDs(ctx context.Context, now time.Time, limit int) ([]int64, error) {
	var ids []int64
	err := database.Conn(ctx, s.db).Model(&Order{}).
		Where("status = ? AND expires_at <= ?", PendingPayment, now).
		Order("expires_at").Limit(limit).Pluck("id", &ids).Error
	return ids, err
}
