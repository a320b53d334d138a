package chaos

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/sethvargo/go-retry"

	okafka "github.com/oncepay/oncepay/internal/platform/kafka"
	"github.com/oncepay/oncepay/internal/platform/reportsig"
)

// clientTimeout is how long a client waits for one answer before it gives up and retries
// with the same key, on another instance. It is shorter than a paused instance's pause and
// than the slow instance's payments, so that retries after client timeouts happen.
const clientTimeout = 2500 * time.Millisecond

// settleTimeout is how long one write keeps being retried before the client gives up on an
// answer (a MariaDB restart takes a few seconds; a paused instance a few more).
const settleTimeout = 60 * time.Second

// workload drives randomized business traffic at the instances and records every delivery.
type workload struct {
	w    *world
	h    *history
	http *http.Client
	// admin waits longer, for the direct admin calls (call.direct).
	admin  *http.Client
	kafka  *kafka.Writer
	secret string

	deliveries atomic.Int64
	// kafkaSent keeps the published notifications, so that the redelivery fault can publish
	// some of them again as a producer retry does.
	mu        sync.Mutex
	kafkaSent []kafka.Message
}

func newWorkload(w *world, h *history) *workload {
	return &workload{
		w: w, h: h, secret: w.secret,
		http: &http.Client{Timeout: clientTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 10 * time.Second}},
		// A day's reconcile-bills over 30,000 deliveries' trades takes longer than a client's
		// patience.
		admin: &http.Client{Timeout: settleTimeout},
		kafka: &kafka.Writer{
			Addr:         kafka.TCP(w.kafka.Brokers...),
			Topic:        okafka.TopicPaymentNotifications,
			Balancer:     &kafka.Hash{},
			BatchTimeout: 5 * time.Millisecond,
			RequiredAcks: kafka.RequireAll,
		},
	}
}

// call is one HTTP delivery to make.
type call struct {
	op, user, key string
	method, path  string
	bearer        string
	idemKey       string // the Idempotency-Key header, if any
	signed        bool   // X-Signature over the body (notifications)
	body          []byte
	// direct sends the call to the instance itself, not through the gateway: the run's own
	// long admin calls (reconcile-bills over a whole day), which the gateway's short read
	// timeout would cut off.
	direct bool
}

// reportKind is the kind a report posted to path is signed for.
func reportKind(path string) string {
	switch path {
	case "/v1/recharges/notify":
		return "recharge"
	case "/v1/refunds/notify":
		return "refund"
	}
	return "trade"
}

// deliver sends c once, through the gateway, and records the answer under a request id of
// its own (X-Request-Id), by which annotateGateway later finds the instances nginx sent it
// to. inst is the instance a client without a gateway picks (a world without one, in tests);
// nginx picks for itself, in turn, so copies sent at once still land on distinct instances.
func (wl *workload) deliver(ctx context.Context, inst int, c call) *event {
	e := &event{Kind: kindHTTP, Op: c.op, User: c.user, Key: c.key, Method: c.method, Path: c.path, Req: string(c.body),
		ReqID: fmt.Sprintf("chaos-%d-%s", wl.deliveries.Add(1), randomHex(4))}
	base := wl.w.insts[inst-1].base
	if wl.w.gw != nil && !c.direct {
		base = wl.w.gw.base()
	} else {
		e.Inst = inst
		if wl.w.gw != nil {
			// Past the gateway: no gateway log will have the id.
			e.ReqID = ""
		}
	}
	start := time.Now()
	defer func() {
		e.Ms = float64(time.Since(start).Microseconds()) / 1000
		wl.h.add(e)
	}()
	req, err := http.NewRequestWithContext(ctx, c.method, base+c.path, bytes.NewReader(c.body))
	if err != nil {
		e.Err = err.Error()
		return e
	}
	if e.ReqID != "" {
		req.Header.Set("X-Request-Id", e.ReqID)
	}
	if c.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+c.bearer)
	}
	if c.idemKey != "" {
		req.Header.Set("Idempotency-Key", c.idemKey)
	}
	if c.signed {
		// Signed at each attempt, as a channel signs every attempt afresh.
		req.Header.Set("X-Signature", reportsig.Sign(wl.secret, time.Now(), reportKind(c.path), c.body))
	}
	if len(c.body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	client := wl.http
	if c.direct && wl.admin != nil {
		client = wl.admin
	}
	resp, err := client.Do(req)
	if err != nil {
		e.Err = shortErr(err)
		return e
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		e.Err = shortErr(err)
		return e
	}
	e.Status, e.Resp = resp.StatusCode, string(b)
	e.Outcome = resp.Header.Get("Idempotency-Outcome")
	e.Degraded = resp.Header.Get("Idempotency-Degraded")
	e.Replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	return e
}

// shortErr keeps the cause of a client error without its long URL.
func shortErr(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection reset"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// settle delivers a channel's report c until an answer is final: first `copies` copies at
// once to distinct random instances (the same report arriving by several paths), then one
// copy at a time, each after a backoff (settleBackoff) and to a random instance, as a channel
// retrying after a timeout or a 409 in_use does. It returns the first final answer, or nil
// when none came within settleTimeout or before ctx ended. The users' writes are retried by
// oncepay's Go client instead (write).
func (wl *workload) settle(ctx context.Context, c call, copies int) *event {
	fanned := false
	e, _ := retry.DoValue(ctx, settleBackoff(), func(ctx context.Context) (*event, error) {
		var e *event
		if !fanned {
			fanned = true
			e = wl.fanout(ctx, c, copies)
		} else {
			e = wl.deliver(ctx, wl.randomInst(), c)
		}
		if e == nil || !e.final() {
			return nil, retry.RetryableError(errNotFinal)
		}
		return e, nil
	})
	return e
}

// errNotFinal is a delivery of settle whose answer does not settle its write.
var errNotFinal = errors.New("no final answer")

// settleBackoff returns the pauses between settle's deliveries of one write, for
// settleTimeout from now: 150 ms ± 33 % (100 to 200 ms), doubled after each delivery up to
// 4.8 s ± 33 % (3.2 to 6.4 s), where it stays. The jitter keeps the clients that met one
// fault from coming back all at once.
func settleBackoff() retry.Backoff {
	return retry.WithMaxDuration(settleTimeout,
		retry.WithJitterPercent(33, retry.WithCappedDuration(4800*time.Millisecond, retry.NewExponential(150*time.Millisecond))))
}

// fanout sends copies of c at once to distinct instances and returns a final answer, if any.
func (wl *workload) fanout(ctx context.Context, c call, copies int) *event {
	n := len(wl.w.insts)
	copies = max(1, min(copies, n))
	perm := mrand.Perm(n)
	answers := make([]*event, copies)
	var wg sync.WaitGroup
	for i := range copies {
		wg.Go(func() { answers[i] = wl.deliver(ctx, perm[i]+1, c) })
	}
	wg.Wait()
	for _, a := range answers {
		if a.final() {
			return a
		}
	}
	return nil
}

func (wl *workload) randomInst() int { return 1 + mrand.IntN(len(wl.w.insts)) }

// copiesOf picks how many copies of a write arrive at once: mostly one, often three.
func copiesOf() int {
	switch r := mrand.IntN(10); {
	case r < 5:
		return 1
	case r < 7:
		return 2
	default:
		return 3
	}
}

// orderRef is what a buyer remembers of an order it placed.
type orderRef struct {
	ID     string `json:"order_id"`
	Amount int64  `json:"amount"`
	Status string `json:"status"`
}

// buyer is one user's loop: place orders and pay, cancel, refund or abandon them, and
// recharge the balance.
func (wl *workload) buyer(ctx context.Context, u user) {
	for ctx.Err() == nil {
		switch r := mrand.IntN(100); {
		case r < 15:
			wl.recharge(ctx, u)
		default:
			o := wl.placeOrder(ctx, u)
			if o == nil {
				continue
			}
			switch r := mrand.IntN(100); {
			case r < 8: // abandoned: the close job closes it when it expires
			case r < 16:
				wl.cancel(ctx, u, o)
			case r < 24: // a cancel racing the payment (I5)
				var wg sync.WaitGroup
				wg.Go(func() { wl.pay(ctx, u, o) })
				wg.Go(func() { sleepCtx(ctx, time.Duration(mrand.IntN(300))*time.Millisecond); wl.cancel(ctx, u, o) })
				wg.Wait()
			default:
				if wl.pay(ctx, u, o) && mrand.IntN(100) < 35 {
					wl.refund(ctx, u, o)
				}
			}
		}
	}
}

// newKey returns a fresh Idempotency-Key.
func newKey(prefix string) string { return prefix + "-" + randomHex(10) }

// order places an order for u under key, or under a fresh key of its own when key is "".
func (wl *workload) order(ctx context.Context, u user, key string) *orderRef {
	s := chaosSKUs[1]
	switch r := mrand.IntN(10); {
	case r < 2:
		s = chaosSKUs[0]
	case r < 5:
		s = chaosSKUs[2]
	}
	body := fmt.Appendf(nil, `{"items":[{"sku":%q,"quantity":%d}]}`, s.sku, 1+mrand.IntN(3))
	if key == "" {
		key = newKey("order")
	}
	e := wl.write(ctx, call{op: "order", user: u.name, key: key, method: http.MethodPost, path: "/v1/orders",
		bearer: u.apiKey, idemKey: key, body: body}, copiesOf())
	if e == nil || e.Status != http.StatusCreated {
		return nil
	}
	var o orderRef
	if json.Unmarshal([]byte(e.Resp), &o) != nil || o.ID == "" {
		return nil
	}
	return &o
}

func (wl *workload) cancel(ctx context.Context, u user, o *orderRef) {
	key := newKey("cancel")
	wl.write(ctx, call{op: "cancel", user: u.name, key: key, method: http.MethodPost, path: "/v1/orders/" + o.ID + "/cancel",
		bearer: u.apiKey, idemKey: key}, copiesOf())
}

// pay opens the order's trade at the channel through oncepay, has the buyer pay at the
// channel (which notifies oncepay through the gateway, with its own retries) and sends
// extra copies of the notification by HTTP to random instances and by Kafka. It reports
// whether the channel took the buyer's money.
func (wl *workload) pay(ctx context.Context, u user, o *orderRef) bool {
	key := newKey("pay")
	e := wl.write(ctx, call{op: "pay", user: u.name, key: key, method: http.MethodPost, path: "/v1/orders/" + o.ID + "/payments",
		bearer: u.apiKey, idemKey: key}, copiesOf())
	if e == nil || e.Status != http.StatusCreated {
		return false
	}
	var t struct {
		TradeNo string `json:"trade_no"`
	}
	if json.Unmarshal([]byte(e.Resp), &t) != nil || t.TradeNo == "" {
		return false
	}
	err := wl.w.sim.Pay(o.ID)
	wl.h.add(&event{Kind: kindNote, Op: "buyer_pays", User: u.name, Key: t.TradeNo, Detail: "order " + o.ID + errSuffix(err)})
	if err != nil {
		return false
	}
	body := fmt.Appendf(nil, `{"channel":"simpay","trade_no":%q,"out_trade_no":%q,"amount":%d,"status":"SUCCESS"}`, t.TradeNo, o.ID, o.Amount)
	var wg sync.WaitGroup
	if mrand.IntN(2) == 0 {
		wg.Go(func() {
			wl.settle(ctx, call{op: "notify", key: t.TradeNo, method: http.MethodPost, path: "/v1/payments/notify", signed: true, body: body}, copiesOf())
		})
	}
	if mrand.IntN(2) == 0 {
		wg.Go(func() {
			for range 1 + mrand.IntN(2) {
				wl.publish(ctx, t.TradeNo, body)
			}
		})
	}
	wg.Wait()
	return true
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}

// publish sends one signed copy of a payment notification to Kafka, keyed by trade_no.
func (wl *workload) publish(ctx context.Context, tradeNo string, body []byte) {
	m := kafka.Message{Key: []byte(tradeNo), Value: body, Headers: []kafka.Header{
		{Key: "X-Signature", Value: []byte(reportsig.Sign(wl.secret, time.Now(), "trade", body))},
		{Key: okafka.HeaderRequestID, Value: []byte("chaos-" + randomHex(8))},
	}}
	wl.send(ctx, "notify", m)
	wl.mu.Lock()
	wl.kafkaSent = append(wl.kafkaSent, m)
	wl.mu.Unlock()
}

// The producer's retries of one message in send.
const (
	// sendRetries is how many times a failed write is retried.
	sendRetries = 5
	// sendPause is the pause before each retry.
	sendPause = 200 * time.Millisecond
	// sendTimeout bounds each write.
	sendTimeout = 5 * time.Second
)

// send publishes m, retrying a failed write sendRetries times, and records it: Status 1 when
// a write succeeded, otherwise the last error.
func (wl *workload) send(ctx context.Context, op string, m kafka.Message) {
	e := &event{Kind: kindKafka, Op: op, Key: string(m.Key), Req: string(m.Value)}
	start := time.Now()
	err := retry.Do(ctx, retry.WithMaxRetries(sendRetries, retry.NewConstant(sendPause)), func(ctx context.Context) error {
		wctx, cancel := context.WithTimeout(ctx, sendTimeout)
		defer cancel()
		if err := wl.kafka.WriteMessages(wctx, m); err != nil {
			e.Err = err.Error()
			return retry.RetryableError(err)
		}
		return nil
	})
	switch {
	case err == nil:
		e.Status, e.Err = 1, ""
	case e.Err == "": // ctx ended before the first write
		e.Err = err.Error()
	}
	wl.deliveries.Add(1)
	e.Ms = float64(time.Since(start).Microseconds()) / 1000
	wl.h.add(e)
}

// redeliver publishes n earlier notifications again, as a producer that did not see its
// acknowledgement does.
func (wl *workload) redeliver(ctx context.Context, n int) int {
	wl.mu.Lock()
	var ms []kafka.Message
	for range n {
		if len(wl.kafkaSent) == 0 {
			break
		}
		ms = append(ms, wl.kafkaSent[mrand.IntN(len(wl.kafkaSent))])
	}
	wl.mu.Unlock()
	for _, m := range ms {
		wl.send(ctx, "notify_redelivered", m)
	}
	return len(ms)
}

// refund asks for the whole amount, or half of it and then, sometimes, the rest.
func (wl *workload) refund(ctx context.Context, u user, o *orderRef) {
	if !wl.awaitStatus(ctx, u, o, "PAID", 10*time.Second) {
		return
	}
	amounts := []int64{0}
	if mrand.IntN(2) == 0 && o.Amount >= 2 {
		amounts = []int64{o.Amount / 2}
		if mrand.IntN(2) == 0 {
			amounts = append(amounts, o.Amount-o.Amount/2)
		}
	}
	for _, a := range amounts {
		var body []byte
		if a > 0 {
			body = fmt.Appendf(nil, `{"amount":%d,"reason":"chaos"}`, a)
		}
		key := newKey("refund")
		wl.write(ctx, call{op: "refund", user: u.name, key: key, method: http.MethodPost, path: "/v1/orders/" + o.ID + "/refunds",
			bearer: u.apiKey, idemKey: key, body: body}, copiesOf())
	}
}

// awaitStatus polls the order until it has status or d has passed.
func (wl *workload) awaitStatus(ctx context.Context, u user, o *orderRef, status string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		e := wl.deliver(ctx, wl.randomInst(), call{op: "get_order", user: u.name, method: http.MethodGet, path: "/v1/orders/" + o.ID, bearer: u.apiKey})
		var got orderRef
		if e.Status == http.StatusOK && json.Unmarshal([]byte(e.Resp), &got) == nil {
			if got.Status == status {
				return true
			}
			if got.Status != "PENDING_PAYMENT" {
				return false
			}
		}
		sleepCtx(ctx, 300*time.Millisecond)
	}
	return false
}

// recharge asks for a recharge, pays it at the channel and then delivers the channel's
// notification for it, several copies at once and retried until acknowledged.
func (wl *workload) recharge(ctx context.Context, u user) {
	amount := int64(100 + mrand.IntN(100000))
	key := newKey("recharge")
	e := wl.write(ctx, call{op: "recharge", user: u.name, key: key, method: http.MethodPost, path: "/v1/recharges",
		bearer: u.apiKey, idemKey: key, body: fmt.Appendf(nil, `{"amount":%d}`, amount)}, copiesOf())
	if e == nil || e.Status != http.StatusCreated {
		return
	}
	var rc struct {
		ID string `json:"recharge_id"`
	}
	if json.Unmarshal([]byte(e.Resp), &rc) != nil || rc.ID == "" {
		return
	}
	// The buyer tops up at the channel, which bills the trade and reports it itself; the
	// copies below race the channel's own notification.
	t, err := wl.w.sim.Recharge(rc.ID, amount, wl.w.gw.base()+"/v1/recharges/notify")
	wl.h.add(&event{Kind: kindNote, Op: "buyer_recharges", User: u.name, Key: t.TradeNo, Detail: "recharge " + rc.ID + errSuffix(err)})
	if err != nil {
		return
	}
	tradeNo := t.TradeNo
	body := fmt.Appendf(nil, `{"channel":"simpay","trade_no":%q,"out_trade_no":%q,"amount":%d,"status":"SUCCESS"}`, tradeNo, rc.ID, amount)
	wl.settle(ctx, call{op: "recharge_notify", user: u.name, key: tradeNo, method: http.MethodPost, path: "/v1/recharges/notify",
		signed: true, body: body}, copiesOf())
}

// jobs runs oncepay's admin jobs on random instances, beside their own schedules.
func (wl *workload) jobs(ctx context.Context) {
	paths := []string{
		"/v1/admin/jobs/close-expired-orders/run",
		"/v1/admin/jobs/reconcile-payments/run",
		"/v1/admin/jobs/resume-refunds/run",
	}
	for ctx.Err() == nil {
		sleepCtx(ctx, time.Duration(1000+mrand.IntN(1500))*time.Millisecond)
		if ctx.Err() != nil {
			return
		}
		wl.deliver(ctx, wl.randomInst(), call{op: "job", method: http.MethodPost, path: paths[mrand.IntN(len(paths))], bearer: wl.w.adminKey})
	}
}

// sleepCtx sleeps d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// randomHex returns n random bytes as hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
