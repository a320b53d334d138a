// Package order owns orders and their state machine. Every status change is one conditional
// UPDATE whose precondition comes from the transition table below; the number of rows it
// affected decides what happened, never a SELECT before it (I1, I5).
package order

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
	idem "github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/inventory"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/kafka"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// Limits of an order request (docs/contract.md).
const (
	MaxItems    = 50
	MaxQuantity = 1000
	// MaxAmount is the largest order total, in cents (10^10): a notification cannot pay more.
	MaxAmount = 10_000_000_000
)

// Service runs the order use cases. A write takes the transaction it runs in as an argument
// — the idempotency guard's, where the dedup record commits with it (I3) — and orders its
// statements so that contended rows (stock, the order's status) are locked last and for as
// few round trips as possible. Jobs that run outside the guard open their own transaction.
type Service struct {
	db     *gorm.DB
	ids    *ids.Generator
	orders Store
	stock  stock
	events *outbox.Writer
	ttl    time.Duration
}

// NewService returns the order service. Unpaid orders expire after ttl.
func NewService(db *gorm.DB, gen *ids.Generator, events *outbox.Writer, ttl time.Duration) *Service {
	return &Service{db: db, ids: gen, orders: Store{localLocks: !certifiedLocks(db)}, stock: stock{ids: gen}, events: events, ttl: ttl}
}

// certifiedLocks reports whether db is a MariaDB Galera node, whose row locks must be writes
// to be certified across the cluster (Store.Lock). When the server cannot be asked, it says
// yes: a write lock is correct on every server, a locking read is not on Galera.
func certifiedLocks(db *gorm.DB) bool {
	if database.DialectOf(db) != database.MySQL {
		return false
	}
	if galera, known := database.KnownGalera(db); known {
		return galera
	}
	sqlDB, err := db.DB()
	if err != nil {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	galera, err := database.IsGalera(ctx, sqlDB)
	return err != nil || galera
}

// Validate checks an order request against the contract's limits: 1..50 lines, each SKU
// once and matching [A-Za-z0-9._-]{1,64}, quantities 1..1000. Its errors are invalid_request
// and name the offending field by its JSON path ("items[3].quantity").
func Validate(lines []Line) error {
	if len(lines) == 0 || len(lines) > MaxItems {
		return apperr.ErrInvalidRequest.Withf("items must hold 1..%d lines, got %d", MaxItems, len(lines))
	}
	seen := make(map[string]bool, len(lines))
	for i, l := range lines {
		if err := inventory.CheckSKU(fmt.Sprintf("items[%d].sku", i), l.SKU); err != nil {
			return err
		}
		switch {
		case l.Quantity < 1 || l.Quantity > MaxQuantity:
			return apperr.ErrInvalidRequest.Withf("items[%d].quantity must be 1..%d, got %d", i, MaxQuantity, l.Quantity)
		case seen[l.SKU]:
			return apperr.ErrInvalidRequest.Withf("items[%d].sku: %s is listed twice; send one line per SKU", i, l.SKU)
		}
		seen[l.SKU] = true
	}
	return nil
}

// Create is the whole transaction of placing an order for userID, in tx (the guard's), in the
// order it runs — lines must have passed Validate. Four round trips on MySQL, BEGIN and
// COMMIT included:
//
//  1. the prices and the database's clock, one plain read that locks nothing;
//  2. then one batch (database.Batch), in this order: the order's new rows — the order, its
//     items, its order.created event and its stock movements, whose unique key stops a second
//     reservation for the order (I1);
//  3. the dedup record of the request, written by record — before any hot row is locked, so
//     that a duplicate is refused without waiting on one (I3; a nil record writes none, for
//     a caller that runs the use case unguarded);
//  4. last, the contended stock rows: the conditional UPDATEs available − q, reserved + q,
//     locked for the rest of the batch and the commit only. Not enough stock is ErrOutOfStock
//     and rolls everything back.
func (s *Service) Create(ctx context.Context, tx *gorm.DB, userID int64, lines []Line, record func(Order) error) (Order, error) {
	o, err := s.priced(ctx, tx, userID, lines)
	if err != nil {
		return Order{}, err
	}
	msg, ev, err := s.event(ctx, o, outbox.OrderCreated)
	if err != nil {
		return Order{}, err
	}
	b := database.Hold(tx)
	b.Insert(ctx, &o, &o.Items, msg, ev, s.stock.rows(Reserve, o.ID, lines))
	if record != nil {
		if err := record(o); err != nil {
			return Order{}, err
		}
	}
	s.stock.move(ctx, b, Reserve, lines)
	return o, b.Send(ctx)
}

// priced is a new PENDING_PAYMENT order of lines for userID at today's prices, not written.
func (s *Service) priced(ctx context.Context, tx *gorm.DB, userID int64, lines []Line) (Order, error) {
	// The order's times come from the database's clock, read with the prices, as the close
	// job's "now" does, so that an order expires the TTL after it was placed whatever the
	// clock of the instance that placed it says (docs/incidents.md, I5).
	prices, now, err := s.stock.prices(ctx, tx, lines)
	if err != nil {
		return Order{}, err
	}
	now = now.Truncate(time.Microsecond)
	o := Order{
		ID: s.ids.Next(), UserID: userID, Status: PendingPayment, Currency: Currency,
		CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(s.ttl),
	}
	for _, l := range lines {
		o.Items = append(o.Items, Item{OrderID: o.ID, SKU: l.SKU, Quantity: l.Quantity, Price: prices[l.SKU]})
		o.Amount += l.Quantity * prices[l.SKU]
	}
	if o.Amount > MaxAmount {
		return Order{}, apperr.ErrInvalidRequest.Withf("the order's total %d exceeds 10^10 cents", o.Amount)
	}
	return o, nil
}

// Get returns order id if it belongs to userID; another user's order is ErrNotFound.
func (s *Service) Get(ctx context.Context, userID, id int64) (Order, error) {
	return s.owned(ctx, s.db, userID, id)
}

func (s *Service) owned(ctx context.Context, db *gorm.DB, userID, id int64) (Order, error) {
	o, err := s.orders.Get(ctx, db, id)
	if err == nil && o.UserID != userID {
		return Order{}, ErrNotFound
	}
	return o, err
}

// Cancel moves userID's order id from PENDING_PAYMENT to CANCELLED and releases its stock, in
// tx, in the order it runs:
//
//  1. the order, a plain read: one that has moved on is ErrIllegalState with its state;
//  2. one batch: the new rows — its order.cancelled event and its stock releases — then the
//     dedup record of the cancelled order, written by record (a nil record writes none), then
//     the contended rows: the conditional PENDING_PAYMENT → CANCELLED (I5) and the stock. An
//     order that moved on since the read fails the transition, and the guard runs it all
//     again (idempotent.ErrStale), to find it moved.
func (s *Service) Cancel(ctx context.Context, tx *gorm.DB, userID, id int64, record func(Order) error) (Order, error) {
	o, err := s.owned(ctx, tx, userID, id)
	if err != nil {
		return Order{}, err
	}
	if o.Status != PendingPayment {
		return Order{}, ErrIllegalState.Withf("order %d is %s; only %s orders can be cancelled", id, o.Status, PendingPayment)
	}
	o.Status, o.UpdatedAt = Cancelled, clock.Now().Truncate(time.Microsecond)
	msg, ev, err := s.event(ctx, o, "order.cancelled")
	if err != nil {
		return Order{}, err
	}
	b := database.Hold(tx)
	b.Insert(ctx, msg, ev, s.stock.rows(Release, o.ID, lines(o)))
	if record != nil {
		if err := record(o); err != nil {
			return Order{}, err
		}
	}
	s.orders.TransitionIn(ctx, b, o.ID, Cancelled, map[string]any{"updated_at": o.UpdatedAt})
	s.stock.move(ctx, b, Release, lines(o))
	if err := b.Send(ctx); database.IsDuplicateKey(err) {
		// A close of the order committed first: its stock releases hold the movements'
		// unique key. Run again, and find the order closed.
		return Order{}, fmt.Errorf("%w: %w", idempotent.ErrStale, err)
	} else if err != nil {
		return Order{}, err
	}
	return o, nil
}

// Close moves an expired order from PENDING_PAYMENT to CLOSED and releases its stock, in a
// transaction of its own. It reports false when the order had already moved on — paid in
// the meantime, say — and then changes nothing (I5).
//
// A close racing the order's payment can lose a deadlock to it (each inserts stock movements
// and locks the order's row, in different orders); the database then rolls the close back
// whole, so it is run again, up to three times, and finds the order paid or closes it. The
// close job once failed its run on such a deadlock (TestCloseRacesPayment).
func (s *Service) Close(ctx context.Context, id int64) (bool, error) {
	for attempt := 1; ; attempt++ {
		moved, err := s.closeOnce(ctx, id)
		if err == nil || !database.IsRetryable(err) || attempt == 3 {
			return moved, err
		}
		select {
		case <-ctx.Done():
			return false, err
		case <-time.After(time.Duration(attempt) * 20 * time.Millisecond):
		}
	}
}

// closeOnce is one attempt of Close.
func (s *Service) closeOnce(ctx context.Context, id int64) (bool, error) {
	var moved bool
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		o, err := s.orders.Get(ctx, tx, id)
		if err != nil {
			return err
		}
		// Expired by the database's clock, not this instance's: one running ahead once closed
		// orders before their expires_at (docs/incidents.md, I5).
		now, err := database.Now(ctx, tx)
		if err != nil || now.Before(o.ExpiresAt) {
			return err
		}
		moved, err = s.endAt(ctx, tx, o, Closed, "order.closed", map[string]any{"updated_at": now})
		return err
	})
	return moved, err
}

// endAt moves o to CLOSED (to), releases its stock and writes its event (event), or reports
// false when the precondition turned it away; set adds columns: a close stamps updated_at,
// its close time, with the database's clock, which the chaos run's no_order_closed_early
// compares with expires_at.
func (s *Service) endAt(ctx context.Context, tx *gorm.DB, o Order, to Status, event string, set map[string]any) (bool, error) {
	moved, err := s.orders.Transition(ctx, tx, o.ID, to, set)
	if err != nil || !moved {
		return false, err
	}
	o.Status = to
	if err := s.emit(ctx, tx, o, event); err != nil {
		return false, err
	}
	return true, s.stock.apply(ctx, tx, Release, o.ID, lines(o))
}

// Pay moves order id from PENDING_PAYMENT to PAID for the channel's trade, confirms its
// stock and writes order.paid, in tx, in one batch. It reports false, changing nothing, when
// the order had already moved on; the returned order is then its state, for the caller to
// decide. An order that moves on between the read and the write is idempotent.ErrStale, and
// tx must be rolled back (payment.Service.Apply is the planned form, with a dedup record).
func (s *Service) Pay(ctx context.Context, tx *gorm.DB, id int64, channel, tradeNo string) (bool, Order, error) {
	o, err := s.orders.Get(ctx, tx, id)
	if err != nil || o.Status != PendingPayment {
		return false, o, err
	}
	b := database.Hold(tx)
	paid, err := s.PayRows(ctx, b, o, channel, tradeNo)
	if err != nil {
		return false, Order{}, err
	}
	s.PayUpdates(ctx, b, paid)
	if err := b.Send(ctx); err != nil {
		return false, Order{}, err
	}
	return true, paid, nil
}

// PayRows adds to b the new rows of paying o, read PENDING_PAYMENT, with the channel's trade
// — its order.paid event and its stock confirmations — and returns o as the payment leaves
// it. PayUpdates adds the contended rows; a use case places its dedup record between them.
func (s *Service) PayRows(ctx context.Context, b *database.Batch, o Order, channel, tradeNo string) (Order, error) {
	now := clock.Now().Truncate(time.Microsecond) // as the column keeps it, and the event shows it
	o.Status, o.Channel, o.TradeNo, o.PaidAt, o.UpdatedAt = Paid, &channel, &tradeNo, &now, now
	msg, ev, err := s.event(ctx, o, "order.paid")
	if err != nil {
		return Order{}, err
	}
	b.Insert(ctx, msg, ev, s.stock.rows(Confirm, o.ID, lines(o)))
	return o, nil
}

// PayUpdates adds to b the contended rows of paying the order paid (PayRows): its conditional
// transition to PAID — which fails with idempotent.ErrStale when the order moved on after it
// was read, so that the transaction runs again and finds it moved (I5) — then its stock rows.
func (s *Service) PayUpdates(ctx context.Context, b *database.Batch, paid Order) {
	s.orders.TransitionIn(ctx, b, paid.ID, Paid, map[string]any{
		"channel": *paid.Channel, "trade_no": *paid.TradeNo, "paid_at": *paid.PaidAt, "updated_at": paid.UpdatedAt,
	})
	s.stock.move(ctx, b, Confirm, lines(paid))
}

// LockPayable returns userID's order id with its row locked in tx, provided it can still be
// paid: PENDING_PAYMENT and not expired; otherwise ErrIllegalState. Another user's order is
// ErrNotFound. Opening a channel trade commits
// its row under this lock, and a cancel changes the same row, so that whichever commits
// second sees the other (payment.Trades.Open and CheckCancel).
func (s *Service) LockPayable(ctx context.Context, tx *gorm.DB, userID, id int64) (Order, error) {
	if err := s.orders.Lock(ctx, tx, id); err != nil {
		return Order{}, err
	}
	o, err := s.orders.Current(ctx, tx, id)
	switch {
	case err != nil:
		return Order{}, err
	case o.UserID != userID:
		return Order{}, ErrNotFound
	}
	// Unexpired by the database's clock, the close job's (Close): an instance whose clock runs
	// behind once opened trades on orders the close job was closing.
	now, err := database.Now(ctx, tx)
	if err != nil {
		return Order{}, err
	}
	if o.Status != PendingPayment || !now.Before(o.ExpiresAt) {
		return Order{}, ErrIllegalState.Withf("order %d is %s (expires %s); only an unexpired %s order can be paid",
			id, o.Status, o.ExpiresAt.UTC().Format(time.RFC3339), PendingPayment)
	}
	return o, nil
}

// Lock takes order id's row lock in tx, certified across the nodes of a Galera cluster
// (Store.Lock), or reports ErrNotFound.
func (s *Service) Lock(ctx context.Context, tx *gorm.DB, id int64) error {
	return s.orders.Lock(ctx, tx, id)
}

// Lookup returns order id whoever owns it, for the payment path, read on db: the
// transaction the caller is in (never the pool from inside one — on SQLite a transaction
// holds the only write lock and a pool connection of its own, so reading beside it can wait
// on a pool that the queued writers have exhausted), or the pool outside any.
func (s *Service) Lookup(ctx context.Context, db *gorm.DB, id int64) (Order, error) {
	return s.orders.Get(ctx, db, id)
}

// ExpiredIDs returns up to limit orders past their expiry by the database's clock, still
// unpaid. The instance's clock may run minutes off the others' (docs/incidents.md, I5).
func (s *Service) ExpiredIDs(ctx context.Context, limit int) ([]int64, error) {
	now, err := database.Now(ctx, s.db)
	if err != nil {
		return nil, err
	}
	return s.orders.ExpiredIDs(ctx, s.db, now, limit)
}

func lines(o Order) []Line {
	out := make([]Line, len(o.Items))
	for i, it := range o.Items {
		out[i] = Line{SKU: it.SKU, Quantity: it.Quantity}
	}
	return out
}

// Event is the value of an order.events message.
type Event struct {
	EventID    string `json:"event_id"`
	Type       string `json:"type"`
	OrderID    string `json:"order_id"`
	UserID     string `json:"user_id"`
	Status     Status `json:"status"`
	Amount     int64  `json:"amount"`
	OccurredAt string `json:"occurred_at"`
}

// emit writes an order event in tx, the transaction of the change: the order.events message
// for the relay to Kafka and the merchant's event (webhooks and the events API, I17), under one
// event id, in one round trip.
func (s *Service) emit(ctx context.Context, tx *gorm.DB, o Order, typ string) error {
	msg, ev, err := s.event(ctx, o, typ)
	if err == nil {
		err = database.Insert(ctx, tx, msg, ev)
	}
	if err != nil {
		return fmt.Errorf("outbox %s: %w", typ, err)
	}
	return nil
}

// event returns the two rows of o's event typ, not written: the order.events message and the
// merchant's event, whose data is the order as it is now (ViewOf).
func (s *Service) event(ctx context.Context, o Order, typ string) (*outbox.Message, *outbox.Event, error) {
	return s.events.Rows(ctx, kafka.TopicOrderEvents, ids.Format(o.ID), eventOf(o, typ), typ, ViewOf(o))
}

// eventOf builds the order.events value of o for the outbox.
func eventOf(o Order, typ string) func(eventID int64) any {
	return func(eventID int64) any {
		return Event{
			EventID: ids.Format(eventID), Type: typ, OrderID: ids.Format(o.ID), UserID: ids.Format(o.UserID),
			Status: o.Status, Amount: o.Amount, OccurredAt: clock.Now().Format(time.RFC3339Nano),
		}
	}
}

// The order: its statuses and the transition table every status change follows.

// Status is an order's place in its lifecycle.
type Status string

// The order statuses (docs/contract.md).
const (
	PendingPayment Status = "PENDING_PAYMENT"
	Paid           Status = "PAID"
	Cancelled      Status = "CANCELLED"
	Closed         Status = "CLOSED"
	// Refunded: the SUCCEEDED refunds of a PAID order reached its amount; its stock went back.
	Refunded Status = "REFUNDED"
)

// transitions lists, for each status, the statuses an order may come from. It is the only
// source of the preconditions in the conditional UPDATEs: a late close task (I5) or a late
// copy of a payment (I1) finds the order already moved on, affects 0 rows, and changes
// nothing — in particular, nothing but its refunds ever moves an order out of PAID.
var transitions = map[Status][]Status{
	Paid:      {PendingPayment},
	Cancelled: {PendingPayment},
	Closed:    {PendingPayment},
	Refunded:  {Paid},
}

// From returns the statuses an order may reach to from.
func From(to Status) []Status { return transitions[to] }

// Errors of this package.
var (
	// ErrIllegalState is a change the order's current status does not allow.
	ErrIllegalState = apperr.New(http.StatusConflict, "illegal_state", "the order's status does not allow this")
	// ErrNotFound is an unknown order or another user's.
	ErrNotFound = apperr.ErrNotFound.Withf("no such order")
)

// Order is a row of orders with its items.
type Order struct {
	ID        int64
	UserID    int64
	Status    Status
	Amount    int64
	Currency  string
	Channel   *string
	TradeNo   *string
	CreatedAt time.Time
	UpdatedAt time.Time
	ExpiresAt time.Time
	PaidAt    *time.Time
	Items     []Item `gorm:"-"`
}

// Item is a row of order_items: a SKU, its quantity and its unit price at order time.
type Item struct {
	OrderID  int64
	SKU      string `gorm:"column:sku"`
	Quantity int64
	Price    int64
}

// TableName is the table of Item.
func (Item) TableName() string { return "order_items" }

// Currency is the only currency oncepay handles.
const Currency = "CNY"

// PaidBy reports whether o was paid by channel's trade tradeNo, whatever its status since
// (paid, partially or fully refunded): the fact a redelivered report is recognised by once
// its dedup record is gone (I13).
func (o Order) PaidBy(channel, tradeNo string) bool {
	return o.Channel != nil && o.TradeNo != nil && *o.Channel == channel && *o.TradeNo == tradeNo
}

// The store: the order's rows, written in the transaction they belong to.

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

// What refunds ask of an order: its move to REFUNDED.

// Refund moves order id from PAID to REFUNDED, writes order.refunded and returns its stock
// (sold − q, available + q), in tx, once its refunds have reached its amount. The status
// and the stock — the contended rows — come last, after the caller's new rows. It reports
// false, changing nothing, when the order was not PAID (already refunded, say).
func (s *Service) Refund(ctx context.Context, tx *gorm.DB, id int64) (bool, error) {
	moved, err := s.orders.Transition(ctx, tx, id, Refunded, nil)
	if err != nil || !moved {
		return false, err
	}
	o, err := s.orders.Get(ctx, tx, id)
	if err != nil {
		return false, err
	}
	if err := s.emit(ctx, tx, o, "order.refunded"); err != nil {
		return false, err
	}
	return true, s.stock.apply(ctx, tx, Return, o.ID, lines(o))
}

// The order's JSON view, answered by the HTTP handler and carried by events.

// View is the JSON form of an order (docs/contract.md).
type View struct {
	OrderID   string     `json:"order_id"`
	UserID    string     `json:"user_id"`
	Status    Status     `json:"status"`
	Amount    int64      `json:"amount"`
	Currency  string     `json:"currency"`
	Items     []ItemView `json:"items"`
	CreatedAt string     `json:"created_at"`
	ExpiresAt string     `json:"expires_at"`
	PaidAt    *string    `json:"paid_at"`
	TradeNo   *string    `json:"trade_no"`
	// Transfer is the ledger transfer that captured the order's payment (internal/ledger),
	// null until the order is paid.
	Transfer *string `json:"transfer"`
}

// ItemView is the JSON form of an order item.
type ItemView struct {
	SKU      string `json:"sku"`
	Quantity int64  `json:"quantity"`
	Price    int64  `json:"price"`
}

// ViewOf renders o for the API.
func ViewOf(o Order) View {
	v := View{
		OrderID: ids.Format(o.ID), UserID: ids.Format(o.UserID), Status: o.Status, Amount: o.Amount,
		Currency: o.Currency, Items: make([]ItemView, len(o.Items)),
		CreatedAt: o.CreatedAt.UTC().Format(time.RFC3339), ExpiresAt: o.ExpiresAt.UTC().Format(time.RFC3339),
		TradeNo: o.TradeNo,
	}
	for i, it := range o.Items {
		v.Items[i] = ItemView{SKU: it.SKU, Quantity: it.Quantity, Price: it.Price}
	}
	if o.PaidAt != nil {
		s := o.PaidAt.UTC().Format(time.RFC3339)
		v.PaidAt = &s
		if o.Channel != nil && o.TradeNo != nil {
			t := ledger.TradeID(*o.Channel, *o.TradeNo)
			v.Transfer = &t
		}
	}
	return v
}

// Kinds of stock movement; each happens at most once per order and SKU.
const (
	// Reserve: available → reserved, when an order is created.
	Reserve = "RESERVE"
	// Confirm: reserved → sold, when the order is paid.
	Confirm = "CONFIRM"
	// Release: reserved → available, when the order is cancelled or closed.
	Release = "RELEASE"
	// Return: sold → available, when a paid order is refunded in full.
	Return = "RETURN"
)

// Line is one requested SKU and quantity.
type Line struct {
	SKU      string
	Quantity int64
}

// Movement is a row of inventory_movements. Its unique (order_id, sku, kind) is the
// backstop against a stock movement applied twice for one order, whichever path repeated it
// (I1: the triple delivery deducted stock three times).
type Movement struct {
	ID        int64
	OrderID   int64
	SKU       string `gorm:"column:sku"`
	Kind      string
	Quantity  int64
	CreatedAt time.Time
}

// TableName is the table of Movement.
func (Movement) TableName() string { return "inventory_movements" }

// stock applies an order's stock movements. Every method runs in the caller's transaction,
// next to the order change it belongs to.
type stock struct {
	ids *ids.Generator
}

// updates are the conditional UPDATE of each kind: the WHERE clause is the precondition, so
// stock can never go negative however many buyers race (rows changed decide). Each ? is the
// quantity.
var updates = map[string]struct{ set, guard string }{
	Reserve: {"available = available - ?, reserved = reserved + ?", "available >= ?"},
	Confirm: {"reserved = reserved - ?, sold = sold + ?", "reserved >= ?"},
	Release: {"reserved = reserved - ?, available = available + ?", "reserved >= ?"},
	Return:  {"sold = sold - ?, available = available + ?", "sold >= ?"},
}

// prices returns the current price of each SKU in lines and the database's clock (see
// database.Now), read in one plain query that locks nothing — a write that needs both pays
// one round trip — or inventory.ErrUnknownSKU naming the first SKU that is not in the catalog.
func (m stock) prices(ctx context.Context, tx *gorm.DB, lines []Line) (map[string]int64, time.Time, error) {
	skus := make([]string, len(lines))
	for i, l := range lines {
		skus[i] = l.SKU
	}
	var items []struct {
		SKU   string `gorm:"column:sku"`
		Price int64
		Now   database.Clock
	}
	err := tx.WithContext(ctx).Model(&inventory.Item{}).Select("sku, price, "+database.NowSQL(tx)+" AS now").
		Where("sku IN ?", skus).Find(&items).Error
	if err != nil {
		return nil, time.Time{}, err
	}
	prices := make(map[string]int64, len(items))
	for _, it := range items {
		prices[it.SKU] = it.Price
	}
	for _, s := range skus {
		if _, ok := prices[s]; !ok {
			return nil, time.Time{}, inventory.ErrUnknownSKU.Withf("no such SKU %q", s)
		}
	}
	return prices, items[0].Now.Time, nil
}

// apply moves stock of kind for every line of orderID, in tx. The movement rows go first, in
// one statement: their unique (order_id, sku, kind) turns a repeated movement into a no-op
// (I1). The stock rows — the contended ones — are updated last, in SKU order, so that two
// orders touching the same SKUs lock them in the same order and cannot deadlock, and each
// is held for as few round trips as possible. A reservation larger than what is available is
// ErrOutOfStock; the caller's transaction must then roll back.
func (m stock) apply(ctx context.Context, tx *gorm.DB, kind string, orderID int64, lines []Line) error {
	if _, ok := updates[kind]; !ok {
		return fmt.Errorf("unknown movement kind %q", kind)
	}
	sorted := slices.Clone(lines)
	slices.SortFunc(sorted, func(a, b Line) int { return strings.Compare(a.SKU, b.SKU) })
	fresh, err := m.record(tx.WithContext(ctx), kind, orderID, sorted)
	if err != nil {
		return err
	}
	b := database.Hold(tx)
	m.move(ctx, b, kind, fresh)
	return b.Send(ctx)
}

// rows returns the movement rows of kind for lines of orderID, for a caller that inserts them
// with its other new rows (see database.Insert) and then calls move.
func (m stock) rows(kind string, orderID int64, lines []Line) []Movement {
	now := clock.Now()
	rows := make([]Movement, len(lines))
	for i, l := range lines {
		rows[i] = Movement{ID: m.ids.Next(), OrderID: orderID, SKU: l.SKU, Kind: kind, Quantity: l.Quantity, CreatedAt: now}
	}
	return rows
}

// move adds to b the conditional stock UPDATEs of kind for lines — the contended rows — in
// SKU order, so that two orders touching the same SKUs lock them in the same order and cannot
// deadlock. Their movement rows must be in the transaction already, or earlier in b. When b
// is sent, a reservation larger than what is available is inventory.ErrOutOfStock.
func (m stock) move(ctx context.Context, b *database.Batch, kind string, lines []Line) {
	u := updates[kind]
	sorted := slices.Clone(lines)
	slices.SortFunc(sorted, func(a, b Line) int { return strings.Compare(a.SKU, b.SKU) })
	now := clock.Now()
	for _, l := range sorted {
		refusal := fmt.Errorf("inventory %s of %d %s: precondition failed", kind, l.Quantity, l.SKU)
		if kind == Reserve {
			refusal = inventory.ErrOutOfStock.Withf("not enough %s in stock for %d", l.SKU, l.Quantity)
		}
		b.Update(ctx, refusal,
			"UPDATE inventory SET "+u.set+", version = version + 1, updated_at = ? WHERE sku = ? AND "+u.guard,
			l.Quantity, l.Quantity, now, l.SKU, l.Quantity)
	}
}

// record inserts the movement rows of lines, skipping those that already happened, and
// returns the lines whose movement is new. One statement in the common case; a unique-key
// violation (a repeated movement) falls back to one row at a time.
func (m stock) record(tx *gorm.DB, kind string, orderID int64, lines []Line) ([]Line, error) {
	rows := m.rows(kind, orderID, lines)
	err := tx.Create(&rows).Error
	if err == nil || !database.IsDuplicateKey(err) {
		return lines, err
	}
	var fresh []Line
	for i := range rows {
		err := tx.Create(&rows[i]).Error
		switch {
		case database.IsDuplicateKey(err):
			continue // this movement already happened
		case err != nil:
			return nil, err
		}
		fresh = append(fresh, lines[i])
	}
	return fresh, nil
}

// Handler serves the order routes.
type Handler struct {
	orders *Service
	idem   httpkey.Handler
	trades TradeGate
}

// TradeGate is what a cancel asks of the payment channel (payment.Trades implements it): the
// order's channel trade must be unpayable before the order is cancelled, or the buyer could
// pay a cancelled order whose notifications may all be lost (I9).
type TradeGate interface {
	// BeforeCancel runs before the cancel's transaction, under the cancel's key, since it
	// calls the channel: it closes userID's order id's trade there, or applies its payment
	// when the buyer already paid (the cancel then finds the order PAID).
	BeforeCancel(ctx context.Context, userID, id int64) error
	// CheckCancel runs in the cancel's transaction, the order row locked: it refuses the
	// cancel when a trade was opened since BeforeCancel.
	CheckCancel(ctx context.Context, tx *gorm.DB, id int64) error
}

// NewHandler returns the order HTTP handler; idem makes its writes exactly-once and trades
// closes an order's channel trade before a cancel.
func NewHandler(orders *Service, idem httpkey.Handler, trades TradeGate) *Handler {
	return &Handler{orders: orders, idem: idem, trades: trades}
}

// Routes serves the order routes, mounted at /v1/orders behind user authentication. Create
// and cancel are forced-idempotent, marked so (idem.KeyRequired: an Idempotency-Key is
// required; a one-time tok_ key answers the double click, I7); get is naturally idempotent.
func (h *Handler) Routes() chi.Router {
	r := chi.NewRouter()
	r.Method(http.MethodPost, "/", idem.KeyRequired(h.idem, h.create))
	r.Get("/{order_id}", h.get)
	r.Method(http.MethodPost, "/{order_id}/cancel", idem.KeyRequired(h.idem, h.cancel))
	return r
}

type createRequest struct {
	Items []struct {
		SKU      string `json:"sku"`
		Quantity int64  `json:"quantity"`
	} `json:"items"`
}

// create is POST /v1/orders, top to bottom: the key (read by the route's mark), the body
// decoded and validated (a bad one stores nothing), then one transaction through the guard —
// Service.Create: the order's new rows, the dedup record, the stock reserved last — and the
// answer written after the commit. Not enough stock rolls the order back and answers
// out_of_stock, stored.
func (h *Handler) create(w http.ResponseWriter, r *http.Request, key idempotent.Key) {
	body, err := web.ReadBody(r)
	if err != nil {
		h.idem.Reject(w, r, err)
		return
	}
	lines, err := decodeCreate(body)
	if err != nil {
		h.idem.Reject(w, r, err)
		return
	}
	userID, _ := web.UserID(r.Context())
	_, _ = h.idem.Do(w, r, key, body, func(ctx context.Context, tx *gorm.DB, record func(idempotent.Response) error) error {
		_, err := h.orders.Create(ctx, tx, userID, lines, func(o Order) error {
			return record(idem.JSON(http.StatusCreated, ViewOf(o), "Location", "/v1/orders/"+ids.Format(o.ID)))
		})
		return err
	})
}

// decodeCreate decodes and validates the body of POST /v1/orders.
func decodeCreate(body []byte) ([]Line, error) {
	var req createRequest
	if err := web.DecodeBytes(body, &req); err != nil {
		return nil, err
	}
	lines := make([]Line, len(req.Items))
	for i, it := range req.Items {
		lines[i] = Line{SKU: it.SKU, Quantity: it.Quantity}
	}
	return lines, Validate(lines)
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	id, ok := ids.Parse(chi.URLParam(r, "order_id"))
	if !ok {
		web.WriteError(w, r, ErrNotFound)
		return
	}
	userID, _ := web.UserID(r.Context())
	o, err := h.orders.Get(r.Context(), userID, id)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, ViewOf(o))
}

// cancel is POST /v1/orders/{id}/cancel, top to bottom: the key (read by the route's mark),
// then the guard — which claims the key before anything else happens (I12) — runs its two
// phases. Before, under the key's lease and outside any transaction, the order's channel trade
// is made unpayable (TradeGate.BeforeCancel: closed at the channel, or its payment applied);
// then the guard's transaction makes the conditional transition and checks that no trade was
// opened meanwhile. A refused cancel (400, 409 in flight, 422 reused) touches nothing, at the
// channel neither, and a replay answers from the stored outcome. An order that moved on (paid,
// say) answers 409 illegal_state, stored and replayed; a channel that did not answer is a 503
// that stores nothing, so the retry with the same key asks it again.
func (h *Handler) cancel(w http.ResponseWriter, r *http.Request, key idempotent.Key) {
	body, err := web.ReadBody(r)
	if err == nil && len(body) > 0 {
		err = web.DecodeBytes(body, &struct{}{}) // a cancel carries nothing: empty, or {}
	}
	if err != nil {
		h.idem.Reject(w, r, err)
		return
	}
	userID, _ := web.UserID(r.Context())
	id, ok := ids.Parse(chi.URLParam(r, "order_id"))
	req := h.idem.Request(r, key, body)
	req.Before = func(ctx context.Context) error {
		if !ok {
			return ErrNotFound
		}
		return h.trades.BeforeCancel(ctx, userID, id)
	}
	_, _ = h.idem.Run(w, r, req, func(ctx context.Context, tx *gorm.DB, record func(idempotent.Response) error) error {
		_, err := h.orders.Cancel(ctx, tx, userID, id, func(o Order) error {
			return record(idem.JSON(http.StatusOK, ViewOf(o)))
		})
		if err != nil {
			return err
		}
		return h.trades.CheckCancel(ctx, tx, id)
	})
}
