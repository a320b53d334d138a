// Package lab holds naive replicas of the broken code the source articles describe, mounted
// under /lab/ only when ONCEPAY_LAB=true, so that a learner (and tools/cmd/drill) can watch each
// incident happen beside the real route that stops it.
//
// EVERYTHING IN THIS PACKAGE IS WRONG ON PURPOSE. Each handler is labelled with the bug it
// reproduces; no real route uses this package, and nothing outside internal/app imports it.
// The replicas write to the same tables as the real routes, so a drill run leaves visible
// damage on the demo data (a doubled balance, a reopened paid order) — that is the lesson.
package lab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-retry"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
	"github.com/oncepay/oncepay/idempotent/idemlab"
	idem "github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/requestid"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// Lab serves the naive replicas.
type Lab struct {
	db     *gorm.DB
	ids    *ids.Generator
	orders *order.Service
	// orderTTL is how long an order the replicas write themselves stays payable, as the real
	// route's orders do (ONCEPAY_ORDER_TTL).
	orderTTL time.Duration
	rdb      redis.UniversalClient
	secret   string
	// prefix starts every Redis key of the lab (ONCEPAY_REDIS_PREFIX + "lab:").
	prefix string
	// ChaosDelay slows the naive payment between its check and its update (I4), to no less
	// than the article's slowUpstream.
	ChaosDelay time.Duration
	// guarded is oncepay's own idempotency guard, set up the way a paused process meets it
	// (I10): a short lease that nothing renews. It is the one part of the lab that is right;
	// see payGuardedAfterPause.
	guarded httpkey.Handler
	// keyed is oncepay's own idempotency guard with the real routes' settings, for the replica
	// whose bug is not the key check but what it does before it (I12). Its keys are the lab's
	// own (labKeyBizType), so they never answer for oncepay's, nor oncepay's for them.
	keyed httpkey.Handler
	// failover is oncepay's own guard whose holder may lose its lease to a modelled Redis
	// failover (I15); see newFailoverGuard.
	failover httpkey.Handler
	// ChannelURL is the payment channel's base URL for the outbound replicas (I8); when it is
	// empty, they take it from the pay_url of the order's trade (see channelURL).
	ChannelURL string
	// upstream is the instance's own router, which the lossy network of I18 forwards to
	// (loseFirstAnswer); nil until Mount sets it, and then that route answers 503.
	upstream http.Handler
	// lost remembers the runs of I18 whose first answer was lost.
	lost lostAnswers
}

// New returns the lab on the real database and Redis; every Redis key it writes starts with
// redisPrefix + "lab:", and the orders it writes itself expire after orderTTL.
func New(db *gorm.DB, rdb redis.UniversalClient, redisPrefix string, gen *ids.Generator, orders *order.Service, orderTTL time.Duration, secret string, chaos time.Duration) *Lab {
	l := &Lab{db: db, ids: gen, orders: orders, orderTTL: orderTTL, rdb: rdb, secret: secret, prefix: redisPrefix + "lab:", ChaosDelay: chaos}
	l.guarded = idem.HTTP(idempotent.New(db, rdb, idemlab.With(idempotent.Config{
		KeyPrefix: l.prefix,
		// The lease runs out during the pause and nothing renews it: a paused process cannot
		// run its watchdog either. What must stop the stale write is the database.
		LockTTL:   staleLease,
		Classify:  idem.Classify(db),
		Reject:    idem.StoredProblem,
		NewID:     gen.Next,
		RequestID: requestid.From,
	}, idemlab.Lab{NoWatchdog: true, BeforeWork: pauseHolder})))
	l.keyed = idem.HTTP(idempotent.New(db, rdb, idempotent.Config{
		KeyPrefix: l.prefix,
		Classify:  idem.Classify(db),
		Reject:    idem.StoredProblem,
		NewID:     gen.Next,
		RequestID: requestid.From,
	}))
	l.failover = newFailoverGuard(l)
	return l
}

// Routes serves the replicas, mounted at /lab.
// requireUser guards the user routes and requireAdmin the late close, as on the real routes.
func (l *Lab) Routes(requireUser, requireAdmin func(http.Handler) http.Handler) chi.Router {
	r := chi.NewRouter()
	r.Get("/", l.index)
	r.With(l.signed("recharge")).Post("/recharges/notify", l.rechargeNotifyCheckThenAct)
	r.With(requireUser).Post("/orders", l.createOrderDedupAfter)
	r.With(l.signed("trade")).Post("/payments/notify", l.payWithFixedLock)
	r.With(requireAdmin).Post("/orders/{order_id}/close", l.closeUnconditionally)
	r.With(l.signed("trade")).Post("/payments/notify-per-path", l.payPerPathKey)
	r.With(l.signed("trade")).Post("/payments/notify-unconditional", l.payDedupThenUnconditional)
	r.With(requireUser).Post("/orders/submit", l.createOrderEverySubmit)
	r.With(requireUser).Post("/orders/check-then-act", l.createOrderCheckThenAct)
	r.With(l.signed("trade")).Post("/payments/notify-after-pause", l.payAfterPause)
	r.With(l.signed("trade")).Post("/guarded/payments/notify-after-pause", l.payGuardedAfterPause)
	r.With(l.signed("trade")).Post("/payments/notify-after-failover", l.payAfterFailover)
	r.With(l.signed("trade")).Post("/guarded/payments/notify-after-failover", l.payGuardedAfterFailover)
	r.With(requireUser).Post("/orders/{order_id}/refunds", l.refundNewNumberOnTimeout)
	r.With(requireAdmin).Post("/orders/{order_id}/close-expired", l.closeExpiredWithoutAsking)
	r.With(requireUser).Post("/orders/{order_id}/cancel", l.cancelChannelFirst)
	r.With(l.signed("trade")).Post("/payments/notify-purged", l.refundWhatCannotApply)
	r.With(requireUser).Post("/orders/announce-first", l.createOrderAnnounceFirst)
	r.Post("/orders/lose-first-answer", l.loseFirstAnswer)
	return r
}

// signed checks the channel's signature of a report of kind, as the real routes do, so that a
// drill sends the lab and oncepay the very same signed copy.
func (l *Lab) signed(kind string) func(http.Handler) http.Handler {
	return web.RequireReportSignature(l.secret, kind, 5*time.Minute)
}

func (l *Lab) index(w http.ResponseWriter, _ *http.Request) {
	web.WriteJSON(w, http.StatusOK, map[string]any{
		"warning": "naive replicas of the articles' bugs, for drills only; never copy them",
		"routes": map[string]string{
			"POST /lab/recharges/notify":        "I2: check-then-act recharge callback (seed 003)",
			"POST /lab/orders":                  "I3: dedup row written after the business update, outside its transaction (seed 000 §5.1)",
			"POST /lab/payments/notify":         "I4: fixed 5 s lock, no watchdog, check-then-act around 8 s of work (or ONCEPAY_CHAOS_PAYMENT_DELAY when longer) (seed 000 §5.2)",
			"POST /lab/orders/{order_id}/close": "I5: unconditional UPDATE orders SET status='CLOSED' (seed 000 §5.3)",
			"POST /lab/payments/notify-per-path?path=&delivery_id=": "I1: each entry path deduplicates on a key of its own; " +
				"unconditional PAYING → stock confirm → PAID, so three paths confirm three times and a late copy moves PAID back to PAYING (seed 000 §1.1)",
			"POST /lab/payments/notify-unconditional":      "I6: a dedup row that the purge job removes (kept one day), then an UPDATE with no status precondition (seed 000 §4.4)",
			"POST /lab/orders/submit":                      "I7: no one-time token: every submit of the form creates an order (seed 002)",
			"POST /lab/orders/check-then-act":              "flash sale: SELECT available, then UPDATE available = available - q with no WHERE precondition (seed 002 §6)",
			"POST /lab/payments/notify-after-pause?pause=": "I10: a 1 s lease, a check, a pause past the lease, then an unconditional write (Kleppmann)",
			"POST /lab/guarded/payments/notify-after-pause?pause=": "I10, the fix: oncepay's guard with the same unrenewed 1 s lease and pause; " +
				"the state precondition and the dedup record's unique key refuse the stale write",
			"POST /lab/payments/notify-after-failover?pause=": "I15: the naive payment fenced only by its Redis lock; the holder loses its lease " +
				"to a failover right after its check (the key deleted, as a promoted replica that never saw it) and works on; a copy meanwhile pays too",
			"POST /lab/guarded/payments/notify-after-failover?pause=": "I15, the fix: oncepay's guard with the same lost lease; " +
				"two holders at once, and the state precondition and the dedup record's unique key refuse the first one's write",
			"POST /lab/orders/{order_id}/refunds": "I8: a refund whose channel call timed out (1 s) is sent again under a NEW out_refund_no; " +
				"nothing is committed before the call, so the channel, which applied the first, refunds twice",
			"POST /lab/orders/{order_id}/close-expired": "I9: closes an expired PENDING_PAYMENT order and returns its stock without asking the channel, " +
				"so a payment whose notifications were lost is stuck at the channel while the order is CLOSED",
			"POST /lab/orders/{order_id}/cancel": "I12: closes the order's trade at the channel FIRST, then asks oncepay's own guard about the Idempotency-Key; " +
				"a cancel refused there (422 key reused, 409 in flight, 400 foreign token) has already made the order unpayable",
			"POST /lab/payments/notify-purged": "I13: a payment report whose only fence is a dedup row the purge removes; a report for an order that is not " +
				"PENDING_PAYMENT is taken for a payment after close and refunded at once in full under a NEW out_refund_no",
			"POST /lab/orders/announce-first": "I17: order.created is POSTed to the webhook endpoints from inside the transaction, before it commits; " +
				"then the stock is short and the transaction rolls back: the receivers were told of an order that never existed",
			"POST /lab/orders/lose-first-answer?run=": "I18's network, not a bug: oncepay's own POST /v1/orders, whose FIRST answer of each run is held " +
				"until the client gives up and then dropped; a client that retries under a NEW key orders twice, one that keeps its key gets the order replayed",
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
	err = l.write(ctx, func(db *gorm.DB) error { // … then act, unconditionally.
		return db.Table("recharges").Where("id = ?", id).
			Updates(map[string]any{"status": "SUCCEEDED", "channel": n.Channel, "trade_no": nil, "succeeded_at": now, "updated_at": now}).Error
	})
	if err == nil {
		err = l.write(ctx, func(db *gorm.DB) error {
			return db.Table("accounts").Where("user_id = ?", rc.UserID).Update("balance", gorm.Expr("balance + ?", rc.Amount)).Error
		})
	}
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
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
	var o order.Order
	err := l.write(r.Context(), func(tx *gorm.DB) (err error) { // business first, committed …
		o, err = l.orders.Create(r.Context(), tx, userID, lines, nil)
		return err
	})
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

// payWithFixedLock is the BUG of I4: a Redis lock with a fixed 5 s lease and no watchdog
// around a check-then-act payment. The work outlives the lease (slowUpstream), so a retry
// takes the lock, still sees the order unpaid, and pays again: paid_at is stamped twice and
// the stock is confirmed twice.
func (l *Lab) payWithFixedLock(w http.ResponseWriter, r *http.Request) {
	l.payUnderFixedLease(w, r, l.prefix+"pay:", fixedLease, max(l.ChaosDelay, slowUpstream), false)
}

// payUnderFixedLease is the naive payment that I4, I10 and I15 share: take a lease of its own
// that nothing renews, check that the order is unpaid, let hold pass (a slow upstream, a
// pause), then write PAID and confirm the stock with no precondition. A copy that finds the
// lease held answers 409; one that comes after the lease ran out goes through. With
// failover, the lease is lost right after the check, as a Redis failover to a replica that
// never saw it loses it (I15): the next copy finds no lease at all.
func (l *Lab) payUnderFixedLease(w http.ResponseWriter, r *http.Request, keyPrefix string, leaseFor, hold time.Duration, failover bool) {
	n, id, err := decodeNotification(r)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	ctx := r.Context()
	key := keyPrefix + n.Channel + ":" + n.TradeNo
	lease, err := takeFixedLease(ctx, l.rdb, key, leaseFor)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	if lease == "" {
		web.WriteError(w, r, apperr.New(http.StatusConflict, "idempotency_key_in_use", "the lab lock is held; retry later"))
		return
	}
	defer releaseFixedLease(context.WithoutCancel(ctx), l.rdb, key, lease)

	o, err := l.orders.Lookup(ctx, l.db, id)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	if o.Status != order.PendingPayment { // check …
		web.WriteJSON(w, http.StatusOK, success)
		return
	}
	if failover {
		forgetLease(ctx, l.rdb, key)
	}
	// … the slow upstream or the pause, while the lease runs out unrenewed …
	time.Sleep(hold)
	// … then act, unconditionally.
	err = l.markPaidUnconditionally(ctx, o, n)
	if err == nil {
		err = l.confirmStockUnconditionally(ctx, o)
	}
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, success)
}

// markPaidUnconditionally is the naive replicas' payment write: UPDATE orders SET
// status='PAID', paid_at=now … WHERE id=? with no status precondition. Each call stamps
// paid_at again, and moves any status, CLOSED or PAYING, to PAID.
func (l *Lab) markPaidUnconditionally(ctx context.Context, o order.Order, n notification) error {
	now := time.Now().UTC()
	return l.write(ctx, func(db *gorm.DB) error {
		return db.Table("orders").Where("id = ?", o.ID).
			Updates(map[string]any{"status": "PAID", "channel": n.Channel, "trade_no": n.TradeNo, "paid_at": now, "updated_at": now}).Error
	})
}

// confirmStockUnconditionally moves every item of o from reserved to sold with no
// precondition and no movement record: called twice, it confirms twice.
func (l *Lab) confirmStockUnconditionally(ctx context.Context, o order.Order) error {
	for _, it := range o.Items {
		err := l.write(ctx, func(db *gorm.DB) error {
			return db.Table("inventory").Where("sku = ?", it.SKU).Updates(map[string]any{
				"reserved": gorm.Expr("reserved - ?", it.Quantity), "sold": gorm.Expr("sold + ?", it.Quantity),
			}).Error
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// fixedLease is the lab lock's lease: the article's 5 s, fixed, and never renewed (I4).
const fixedLease = 5 * time.Second

// slowUpstream is how long the article's payment work took (I4): 8 s against a 5 s lease, so
// that a retry between the two finds the lease gone and the order still unpaid. The lab's
// payment takes at least that long, or ONCEPAY_CHAOS_PAYMENT_DELAY when it is longer. It
// holds no database transaction, so the time costs nothing but the wait; and a retry that
// lands 2.5 s before the first copy's update still passes the check on a busy embedded
// SQLite, where a read can queue for most of a second.
const slowUpstream = 8 * time.Second

// takeLeaseScript is the naive lock of I4: SET NX PX with a fixed lease. The lease's deadline
// is also written into the value, and a taker that finds the deadline passed takes the lock:
// on a real Redis the key has expired by then and this branch never runs, but the embedded
// Redis (miniredis) does not count TTLs down on its own, and the lab must lose its lease there
// too. KEYS[1] is the lock; ARGV[1] the value "deadline_ms:token", ARGV[2] now in ms, ARGV[3]
// the lease in ms.
var takeLeaseScript = redis.NewScript(`
local held = redis.call('GET', KEYS[1])
if held then
  local deadline = tonumber(string.match(held, '^(%d+):'))
  if deadline == nil or deadline > tonumber(ARGV[2]) then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
return 1
`)

// releaseLeaseScript deletes the lock only if it still holds this taker's value.
var releaseLeaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// takeFixedLease tries once to take key for lease and returns the value that proves it, or ""
// when someone else's lease has not run out yet. Nothing renews it: that is the bug.
func takeFixedLease(ctx context.Context, rdb redis.UniversalClient, key string, lease time.Duration) (string, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	now := time.Now()
	value := fmt.Sprintf("%d:%s", now.Add(lease).UnixMilli(), hex.EncodeToString(b[:]))
	ok, err := takeLeaseScript.Run(ctx, rdb, []string{key}, value, now.UnixMilli(), lease.Milliseconds()).Int()
	if err != nil {
		return "", fmt.Errorf("lab lock: %w", err)
	}
	if ok == 0 {
		return "", nil
	}
	return value, nil
}

// releaseFixedLease gives key back if value still holds it; a lease that ran out and was taken
// by a retry stays with the retry.
func releaseFixedLease(ctx context.Context, rdb redis.UniversalClient, key, value string) {
	_ = releaseLeaseScript.Run(ctx, rdb, []string{key}, value).Err()
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
	o, err := l.orders.Lookup(ctx, l.db, id)
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	err = l.write(ctx, func(db *gorm.DB) error {
		return db.Table("orders").Where("id = ?", id).Updates(map[string]any{"status": "CLOSED", "updated_at": time.Now().UTC()}).Error
	})
	for _, it := range o.Items {
		if err == nil {
			err = l.write(ctx, func(db *gorm.DB) error {
				return db.Table("inventory").Where("sku = ?", it.SKU).Update("available", gorm.Expr("available + ?", it.Quantity)).Error
			})
		}
	}
	if err != nil {
		web.WriteError(w, r, err)
		return
	}
	o, _ = l.orders.Lookup(ctx, l.db, id)
	web.WriteJSON(w, http.StatusOK, order.ViewOf(o))
}

// busyPause is the pause before write runs a write again that the database found busy.
const busyPause = 20 * time.Millisecond

// write runs one of the lab's writes and, while the database answers that it is busy, runs it
// again every busyPause until the request gives up; it returns the write's last error. This is
// not part of any bug: the replicas are wrong about idempotency, not about errors. On the
// embedded SQLite a drill keeps the one write lock taken, six seconds at a time, by payments
// slowed with ONCEPAY_CHAOS_PAYMENT_DELAY — longer than SQLite's busy timeout — and a lost
// write would hide the incident the replica is there to show.
func (l *Lab) write(ctx context.Context, fn func(db *gorm.DB) error) error {
	var last error
	err := retry.Do(ctx, retry.NewConstant(busyPause), func(ctx context.Context) error {
		last = fn(l.db.WithContext(ctx))
		if database.IsRetryable(last) {
			return retry.RetryableError(last)
		}
		return last
	})
	if last != nil {
		return last // also when the request gave up while the write waited: the busy error
	}
	return err
}

func notFound(err error) error {
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return apperr.ErrNotFound
	}
	return err
}
