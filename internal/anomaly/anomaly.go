// Package anomaly records payments that could not be applied — paid after close, amount
// mismatch, a second payment of a paid order, a trade number reused for another order or
// recharge — so that nothing a channel reported is lost:
// each one is kept for refund and reconciliation (I5). Recording is idempotent: one row per
// kind, channel and trade_no, however many copies of the notification arrive.
package anomaly

import (
	"context"
	"net/http"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/requestid"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// Kinds of anomaly.
const (
	// PaidAfterClose is a payment for an order already CANCELLED or CLOSED: refund it.
	PaidAfterClose = "paid_after_close"
	// AmountMismatch is a payment whose amount differs from the order's or recharge's.
	AmountMismatch = "amount_mismatch"
	// DuplicatePayment is a second, different trade_no paying something already paid.
	DuplicatePayment = "duplicate_payment"
	// TradeConflict is a channel + trade_no that already belongs to one order or recharge,
	// reported again for another one (I1: the key is the channel's trade, so a second owner
	// is refused, never applied); or a refund_no reported for another refund.
	TradeConflict = "trade_conflict"
	// RefundStatusConflict is a refund the channel reported ended one way and then the other
	// (FAILED, then SUCCESS): the refund keeps its first end, and the channel's last word is
	// kept on the refund and here, for an operator.
	RefundStatusConflict = "refund_status_conflict"
	// WebhookFailing is a webhook delivery that used up its whole retry schedule without a
	// 2xx: its endpoint is marked failing, and an operator redelivers once the receiver is
	// mended. Its channel is "webhook" and its number "<endpoint_id>/<event_id>".
	WebhookFailing = "webhook_failing"
)

// Resolution says what happens about an anomaly's money (docs/contract.md).
type Resolution string

// The resolutions of an anomaly.
const (
	// Refunded: the payment went back to the buyer through its channel.
	Refunded Resolution = "refunded"
	// RefundPending: a refund is under way, or resume-refunds will open it at its next run.
	RefundPending Resolution = "refund_pending"
	// NeedsOperator: no channel can settle it automatically (the refund failed, the channel
	// and oncepay disagree): an operator must act.
	NeedsOperator Resolution = "needs_operator"
	// None: there is nothing to give back (the money belongs to the number's owner).
	None Resolution = "none"
)

// Refundable are the kinds whose payment goes back to the buyer automatically, exactly once
// each: a refund row keyed by the anomaly.
var Refundable = []string{PaidAfterClose, DuplicatePayment}

// ErrTradeConflict answers a notification whose channel + trade_no already belongs to another
// order or recharge (docs/contract.md): 422, recorded as a TradeConflict anomaly.
var ErrTradeConflict = apperr.New(http.StatusUnprocessableEntity, TradeConflict,
	"this channel trade_no already belongs to another order or recharge")

// Anomaly is a row of anomalies.
type Anomaly struct {
	ID         int64
	Kind       string
	OrderID    *int64
	RechargeID *int64
	Channel    string
	// Space is the number space of TradeNo: "trade" (a trade_no; the default) or "refund" (a
	// refund_no). An anomaly is unique per kind, channel, space and number.
	Space     string
	TradeNo   string
	Amount    int64
	Detail    string
	RequestID string
	CreatedAt time.Time
}

// Recorder writes and lists anomalies.
type Recorder struct {
	db  *gorm.DB
	ids *ids.Generator
}

// NewRecorder returns the anomaly recorder on db.
func NewRecorder(db *gorm.DB, gen *ids.Generator) *Recorder { return &Recorder{db: db, ids: gen} }

// Record stores a once per (kind, channel, trade_no) in tx, the transaction of the answer it
// explains. A second copy of the same anomaly changes nothing.
func (r *Recorder) Record(ctx context.Context, tx *gorm.DB, a Anomaly) error {
	row := r.Row(ctx, a)
	return tx.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(row).Error
}

// Row is a as the row Record writes, for a planned write that inserts it with its other new
// rows (database.Batch.InsertOrSkip), a second copy of it a no-op as with Record.
func (r *Recorder) Row(ctx context.Context, a Anomaly) *Anomaly {
	a.ID = r.ids.Next()
	if a.Space == "" {
		a.Space = "trade"
	}
	a.RequestID = requestid.From(ctx)
	a.CreatedAt = clock.Now()
	return &a
}

// RecordAlone stores a in a small transaction of its own, for a refusal that has no business
// transaction to join: a notification the idempotency guard turned away before any work ran
// (trade_conflict). Like Record, a second copy changes nothing.
func (r *Recorder) RecordAlone(ctx context.Context, a Anomaly) error {
	return r.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return r.Record(ctx, tx, a) })
}

// Listed is an anomaly with what became of its money.
type Listed struct {
	Anomaly
	// RefundID and RefundStatus are the refund opened for it, if any.
	RefundID     *int64
	RefundStatus *string
}

// Resolution is what happens about l's money: the state of its refund for the kinds that are
// refunded automatically, an operator's attention for a disagreement nobody can settle alone.
func (l Listed) Resolution() Resolution {
	switch l.Kind {
	case PaidAfterClose, DuplicatePayment:
		switch {
		case l.RefundStatus == nil:
			return RefundPending
		case *l.RefundStatus == "SUCCEEDED":
			return Refunded
		case *l.RefundStatus == "FAILED":
			return NeedsOperator
		}
		return RefundPending
	case TradeConflict:
		return None
	}
	return NeedsOperator
}

// List returns up to limit anomalies with ids below before (0: from the newest), newest
// first, each with its refund.
func (r *Recorder) List(ctx context.Context, before int64, limit int) ([]Listed, error) {
	q := r.db.WithContext(ctx).Table("anomalies").
		Select("anomalies.*, refunds.id AS refund_id, refunds.status AS refund_status").
		Joins("LEFT JOIN refunds ON refunds.anomaly_id = anomalies.id")
	if before > 0 {
		q = q.Where("anomalies.id < ?", before)
	}
	var out []Listed
	err := q.Order("anomalies.id DESC").Limit(limit).Scan(&out).Error
	return out, err
}

// View is the JSON form of an Anomaly (docs/contract.md, GET /v1/admin/anomalies).
type View struct {
	ID         string `json:"id"`
	Kind       string `json:"kind"`
	OrderID    string `json:"order_id,omitempty"`
	RechargeID string `json:"recharge_id,omitempty"`
	Channel    string `json:"channel"`
	TradeNo    string `json:"trade_no"`
	Amount     int64  `json:"amount"`
	Detail     string `json:"detail"`
	RequestID  string `json:"request_id"`
	CreatedAt  string `json:"created_at"`
	// Resolution is what happens about the money (Listed.Resolution).
	Resolution Resolution `json:"resolution"`
	// RefundID is the refund opened for it, if any.
	RefundID string `json:"refund_id,omitempty"`
}

func viewOf(l Listed) View {
	a := l.Anomaly
	v := View{
		ID: ids.Format(a.ID), Kind: a.Kind, Channel: a.Channel, TradeNo: a.TradeNo, Amount: a.Amount,
		Detail: a.Detail, RequestID: a.RequestID, CreatedAt: a.CreatedAt.UTC().Format(time.RFC3339),
		Resolution: l.Resolution(),
	}
	if l.RefundID != nil {
		v.RefundID = ids.Format(*l.RefundID)
	}
	if a.OrderID != nil {
		v.OrderID = ids.Format(*a.OrderID)
	}
	if a.RechargeID != nil {
		v.RechargeID = ids.Format(*a.RechargeID)
	}
	return v
}

// ListHandler serves GET /v1/admin/anomalies?limit=&cursor=: newest first, limit 1..1000
// (default 100), paged by next_cursor, an opaque token (null on the last page). Any other
// parameter, a second copy of one, or a value out of range is 400 invalid_request: a typo in
// a filter must not silently list everything.
func (r *Recorder) ListHandler(w http.ResponseWriter, req *http.Request) {
	limit, before, err := web.PageParams(req.URL.Query(), "a")
	if err != nil {
		web.WriteError(w, req, err)
		return
	}
	list, err := r.List(req.Context(), before, limit+1)
	if err != nil {
		web.WriteError(w, req, err)
		return
	}
	var next *string
	if len(list) > limit {
		list = list[:limit]
		c := web.PageCursor("a", list[limit-1].ID)
		next = &c
	}
	views := make([]View, len(list))
	for i, a := range list {
		views[i] = viewOf(a)
	}
	web.WriteJSON(w, http.StatusOK, map[string]any{"anomalies": views, "next_cursor": next})
}
