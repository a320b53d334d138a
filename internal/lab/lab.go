// Package lab holds naive replicas of the broken code the source articles describe, mounted
// under /lab/ only when ONCEPAY_LAB=true, so that a learner (and cmd/drill) can watch each
// incident happen beside the real route that stops it.
//
// EVERYTHING IN THIS PACKAGE IS WRONG ON PURPOSE. Each handler is labelled with the bug it
// reproduces; no real route uses this package, and nothing outside internal/app imports it.
// The replicas write to the same tables as the real routes, so a drill run leaves visible
// damage on the demo data (a doubled balance, a reopened paid order) — that is the lesson.
package lab

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// Lab serves the naive replicas.
type Lab struct {
	db     *gorm.DB
	ids    *ids.Generator
	orders *order.Service
	rs     *redsync.Redsync
	secret string
	// ChaosDelay slows the naive payment between its check and its update (I4).
	ChaosDelay time.Duration
}

// New returns the lab on the real database and Redis.
func New(db *gorm.DB, rdb *redis.Client, gen *ids.Generator, orders *order.Service, secret string, chaos time.Duration) *Lab {
	return &Lab{db: db, ids: gen, orders: orders, rs: redsync.New(goredis.NewPool(rdb)), secret: secret, ChaosDelay: chaos}
}

// Routes serves the replicas, mounted at /lab.
// requireUser guards the user routes and requireAdmin the late close, as on the real routes.
func (l *Lab) Routes(requireUser, requireAdmin func(http.Handler) http.Handler) chi.Router {
	r := chi.NewRouter()
	r.Get("/", l.index)
	r.With(web.RequireSignature(l.secret)).Post("/recharges/notify", l.rechargeNotifyCheckThenAct)
	r.With(requireUser).Post("/orders", l.createOrderDedupAfter)
	r.With(web.RequireSignature(l.secret)).Post("/payments/notify", l.payWithFixedLock)
	r.With(requireAdmin).Post("/orders/{order_id}/close", l.closeUnconditionally)
	return r
}

func (l *Lab) index(w http.ResponseWriter, _ *http.Request) {
	web.WriteJSON(w, http.StatusOK, map[string]any{
		"warning": "naive replicas of the articles' bugs, for drills only; never copy them",
		"routes": map[string]string{
			"POST /lab/recharges/notify":        "I2: check-then-act recharge callback (seed 003)",
			"POST /lab/orders":                  "I3: dedup row written after the business update, outside its transaction (seed 000 §5.1)",
			"POST /lab/payments/notify":         "I4: fixed 5 s lock, no watchdog, slowed by ONCEPAY_CHAOS_PAYMENT_DELAY (seed 000 §5.2)",
			"POST /lab/orders/{order_id}/close": "I5: unconditional UPDATE orders SET status='CLOSED' (seed 000 §5.3)",
		},
	})
}

// notification is the body of a channel notification.
type notification struct {
	Channel    string `json:"channel"`
	TradeNo    string `json:"trade_no"`
	OutTradeNo string `json:"out_trade_no"`
	Amount     int64  `json:"amount"`
	Status     string `json:"status"`
}

func decodeNotification(r *http.Request) (notification, int64, error) {
	var n notification
	if err := web.Decode(r, &n); err != nil {
		return n, 0, err
	}
	id, ok := ids.Parse(n.OutTradeNo)
	if !ok {
		return n, 0, apperr.ErrNotFound
	}
	return n, id, nil
}

var success = map[string]string{"result": "success"}

// rechargeNotifyCheckThenAct is the BUG of I2: it reads the recharge, sees PENDING, and only
// then writes SUCCEEDED and credits the balance. Two concurrent copies both see PENDING and
// both credit. A process mutex would not help across instances.
func (l *Lab) rechargeNotifyCheckThenAct(w http.ResponseWriter, r *http.Request) {
	n, id, err := decodeNotification(r)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	ctx := r.Context()
	var rc struct {
		UserID int64
		Amount int64
		Status string
	}
	if err := l.db.WithContext(ctx).Table("recharges").Where("id = ?", id).Take(&rc).Error; err != nil {
		web.WriteError(w, r, notFound(err))
		return
	}
	if rc.Status != "PENDING" { // check …
		web.WriteJSON(w, http.StatusOK, success)
		return
	}
	time.Sleep(50 * time.Millisecond) // … the call to the accounting service …
	now := time.Now().UTC()
	l.db.WithContext(ctx).Table("recharges").Where("id = ?", id). // … then act, unconditionally.
									Updates(map[string]any{"status": "SUCCEEDED", "channel": n.Channel, "trade_no": nil, "succeeded_at": now, "updated_at": now})
	l.db.WithContext(ctx).Table("accounts").Where("user_id = ?", rc.UserID).
		Update("balance", gorm.Expr("balance + ?", rc.Amount))
	web.WriteJSON(w, http.StatusOK, success)
}

// createOrderDedupAfter is the BUG of I3: the order is created (stock reserved, committed)
// first, and the dedup row is inserted afterwards, outside that transaction. Concurrent copies
// all create their order before any of them reaches the unique index, which then catches
// nothing useful.
func (l *Lab) createOrderDedupAfter(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	var req struct {
		Items []struct {
			SKU      string `json:"sku"`
			Quantity int64  `json:"quantity"`
		} `json:"items"`
	}
	if err := web.Decode(r, &req); err != nil || key == "" {
		web.WriteError(w, r, apperr.ErrInvalidRequest.Withf("a JSON body and an Idempotency-Key are required"))
		return
	}
	lines := make([]order.Line, len(req.Items))
	for i, it := range req.Items {
		lines[i] = order.Line{SKU: it.SKU, Quantity: it.Quantity}
	}
	userID, _ := web.UserID(r.Context())
	o, err := l.orders.Create(r.Context(), userID, lines) // business first, committed …
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	now := time.Now().UTC()
	_ = l.db.WithContext(r.Context()).Table("idempotency_records").Create(map[string]any{ // … dedup row after.
		"id": l.ids.Next(), "scope": "lab:user:" + ids.Format(userID), "biz_type": "lab.order.create", "biz_key": key,
		"request_id": "", "fingerprint": "", "status": "COMPLETED", "created_at": now, "updated_at": now, "expires_at": now,
	}).Error // the duplicate-key error is ignored: "someone else already recorded it"
	web.WriteJSON(w, http.StatusCreated, order.ViewOf(o))
}

// payWithFixedLock is the BUG of I4: a Redis lock with a fixed 5 s TTL and no watchdog around
// a check-then-act payment. When the work (slowed by ONCEPAY_CHAOS_PAYMENT_DELAY) outlives the
// lease, a retry takes the lock, still sees the order unpaid, and confirms the stock again.
func (l *Lab) payWithFixedLock(w http.ResponseWriter, r *http.Request) {
	n, id, err := decodeNotification(r)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	ctx := r.Context()
	m := l.rs.NewMutex("oncepay:lab:pay:"+n.Channel+":"+n.TradeNo, redsync.WithExpiry(5*time.Second), redsync.WithTries(1))
	if err := m.TryLockContext(ctx); err != nil {
		web.WriteError(w, r, apperr.New(http.StatusConflict, "idempotency_key_in_use", "the lab lock is held; retry later"))
		return
	}
	defer func() { _, _ = m.UnlockContext(context.WithoutCancel(ctx)) }()

	o, err := l.orders.Lookup(ctx, id)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	if o.Status != order.PendingPayment { // check …
		web.WriteJSON(w, http.StatusOK, success)
		return
	}
	time.Sleep(l.ChaosDelay) // … the slow upstream, while the fixed lease runs out …
	now := time.Now().UTC()
	l.db.WithContext(ctx).Table("orders").Where("id = ?", id). // … then act, unconditionally.
									Updates(map[string]any{"status": "PAID", "channel": n.Channel, "trade_no": n.TradeNo, "paid_at": now, "updated_at": now})
	for _, it := range o.Items {
		l.db.WithContext(ctx).Table("inventory").Where("sku = ?", it.SKU).Updates(map[string]any{
			"reserved": gorm.Expr("reserved - ?", it.Quantity), "sold": gorm.Expr("sold + ?", it.Quantity),
		})
	}
	web.WriteJSON(w, http.StatusOK, success)
}

// closeUnconditionally is the BUG of I5: the late timeout task's
// UPDATE orders SET status='CLOSED' WHERE order_id=? — no status precondition — closes an
// order that was paid in the meantime and hands its stock back.
func (l *Lab) closeUnconditionally(w http.ResponseWriter, r *http.Request) {
	id, ok := ids.Parse(chi.URLParam(r, "order_id"))
	if !ok {
		web.WriteError(w, r, apperr.ErrNotFound)
		return
	}
	ctx := r.Context()
	o, err := l.orders.Lookup(ctx, id)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	l.db.WithContext(ctx).Table("orders").Where("id = ?", id).Updates(map[string]any{"status": "CLOSED", "updated_at": time.Now().UTC()})
	for _, it := range o.Items {
		l.db.WithContext(ctx).Table("inventory").Where("sku = ?", it.SKU).
			Update("available", gorm.Expr("available + ?", it.Quantity))
	}
	o, _ = l.orders.Lookup(ctx, id)
	web.WriteJSON(w, http.StatusOK, order.ViewOf(o))
}

func notFound(err error) error {
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return apperr.ErrNotFound
	}
	return err
}
