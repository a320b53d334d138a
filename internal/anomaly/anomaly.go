// Package anomaly records payments that could not be applied — paid after close, amount
// mismatch, a second payment of a paid order, a trade number reused for another order or
// recharge — so that nothing a channel reported is lost:
// each one is kept for refund and reconciliation (I5). Recording is idempotent: one row per
// kind, channel and trade_no, however many copies of the notification arrive.
package anomaly

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/oncepay/oncepay/internal/platform/apperr"
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
	// is refused, never applied).
	TradeConflict = "trade_conflict"
)

// ErrTradeConflict answers a notification whose channel + trade_no already belongs to another
// order or recharge (CONTRACT.md): 422, recorded as a TradeConflict anomaly.
var ErrTradeConflict = apperr.New(http.StatusUnprocessableEntity, TradeConflict,
	"this channel trade_no already belongs to another order or recharge")

// Anomaly is a row of anomalies.
type Anomaly struct {
	ID         int64
	Kind       string
	OrderID    *int64
	RechargeID *int64
	Channel    string
	TradeNo    string
	Amount     int64
	Detail     string
	RequestID  string
	CreatedAt  time.Time
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
	a.ID = r.ids.Next()
	a.RequestID = requestid.From(ctx)
	a.CreatedAt = time.Now().UTC()
	return tx.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&a).Error
}

// RecordAlone stores a in a small transaction of its own, for a refusal that has no business
// transaction to join: a notification the idempotency guard turned away before any work ran
// (trade_conflict). Like Record, a second copy changes nothing.
func (r *Recorder) RecordAlone(ctx context.Context, a Anomaly) error {
	return r.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return r.Record(ctx, tx, a) })
}

// List returns the newest anomalies first, at most limit.
func (r *Recorder) List(ctx context.Context, limit int) ([]Anomaly, error) {
	var out []Anomaly
	err := r.db.WithContext(ctx).Order("id DESC").Limit(limit).Find(&out).Error
	return out, err
}

// View is the JSON form of an Anomaly (CONTRACT.md, GET /v1/admin/anomalies).
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
}

func viewOf(a Anomaly) View {
	v := View{
		ID: ids.Format(a.ID), Kind: a.Kind, Channel: a.Channel, TradeNo: a.TradeNo, Amount: a.Amount,
		Detail: a.Detail, RequestID: a.RequestID, CreatedAt: a.CreatedAt.UTC().Format(time.RFC3339),
	}
	if a.OrderID != nil {
		v.OrderID = ids.Format(*a.OrderID)
	}
	if a.RechargeID != nil {
		v.RechargeID = ids.Format(*a.RechargeID)
	}
	return v
}

// ListHandler serves GET /v1/admin/anomalies (?limit=N, default 100, at most 1000).
func (r *Recorder) ListHandler(w http.ResponseWriter, req *http.Request) {
	limit := 100
	if s := req.URL.Query().Get("limit"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 && n <= 1000 {
			limit = n
		}
	}
	list, err := r.List(req.Context(), limit)
	if err != nil {
		web.WriteError(w, req, err)
		return
	}
	views := make([]View, len(list))
	for i, a := range list {
		views[i] = viewOf(a)
	}
	web.WriteJSON(w, http.StatusOK, map[string]any{"anomalies": views})
}
