package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/client"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// These tests run the client against a whole oncepay (apptest: MariaDB and Redis when
// ONCEPAY_TEST_MYSQL_DSN and ONCEPAY_TEST_REDIS_ADDR are set, embedded ones otherwise), with
// a fault-injecting transport between them, and judge every write by its effect in oncepay's
// database: order and stock rows, trades, refunds, recharges.

// shop is one oncepay with a user of its own and a SKU of its own, so that counts of rows
// belong to one test.
type shop struct {
	s      *apptest.Server
	userID int64
	apiKey string
	sku    string
}

func newShop(t *testing.T, stock int64) *shop {
	t.Helper()
	return shopOn(t, apptest.Start(t), stock)
}

// shopOn makes a user and a SKU with stock units on s.
func shopOn(t *testing.T, s *apptest.Server, stock int64) *shop {
	t.Helper()
	uid, key := s.User(t, "client")
	sku := "CL-" + apptest.RandHex(4)
	s.PutInventory(t, sku, 1999, stock)
	return &shop{s: s, userID: uid, apiKey: key, sku: sku}
}

// again is another user and SKU on the same oncepay.
func (sh *shop) again(t *testing.T, stock int64) *shop {
	t.Helper()
	return shopOn(t, sh.s, stock)
}

// newClient returns a client of the shop's user over transport, quick to retry.
func (sh *shop) newClient(t *testing.T, transport http.RoundTripper, tune ...func(*client.Config)) *client.Client {
	t.Helper()
	cfg := client.Config{BaseURL: sh.s.URL, APIKey: sh.apiKey, Transport: transport,
		AttemptTimeout: 5 * time.Second, Deadline: 30 * time.Second, InitialBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}
	for _, f := range tune {
		f(&cfg)
	}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (sh *shop) items(qty int64) []client.Item { return []client.Item{{SKU: sh.sku, Quantity: qty}} }

// orders counts the user's orders in the database.
func (sh *shop) orders(t *testing.T) int64 {
	t.Helper()
	return sh.s.Count(t, "orders", "user_id = ?", sh.userID)
}

// wantStock fails unless the SKU's stock rows say available/reserved.
func (sh *shop) wantStock(t *testing.T, available, reserved int64) {
	t.Helper()
	if it := sh.s.Inventory(t, sh.sku); it.Available != available || it.Reserved != reserved {
		t.Errorf("stock of %s: available %d reserved %d, want %d and %d", sh.sku, it.Available, it.Reserved, available, reserved)
	}
}

// TestLostAnswerOrdersOnce is I18: the server made the order, its answer was lost (the
// client timed out), and the client sent the order again. With the same key, the retry is
// answered from the stored outcome: ONE order, one reservation. The control — the same lost
// answer and a retry under a fresh key, as the incident's client did — orders twice, which
// shows the check can see a second order.
func TestLostAnswerOrdersOnce(t *testing.T) {
	sh := newShop(t, 10)
	lossy := &loseAnswers{next: http.DefaultTransport, lose: 1}
	c := sh.newClient(t, lossy)

	res, err := c.CreateOrder(context.Background(), sh.items(2))
	if err != nil {
		t.Fatalf("CreateOrder after a lost answer: %v", err)
	}
	if res.Attempts != 2 || !res.Replayed || res.Outcome != client.OutcomeReplayed || res.Status != http.StatusCreated {
		t.Errorf("result %+v, want 201 on the 2nd attempt, replayed", res.Meta)
	}
	reqs := lossy.all()
	if len(reqs) != 2 {
		t.Fatalf("%d requests sent, want 2", len(reqs))
	}
	if reqs[0].key == "" || reqs[0].key != reqs[1].key || res.Key != reqs[0].key {
		t.Errorf("keys %q and %q (result %q), want one key on both attempts", reqs[0].key, reqs[1].key, res.Key)
	}
	if !bytes.Equal(reqs[0].body, reqs[1].body) || reqs[0].requestID != reqs[1].requestID {
		t.Errorf("the retry is not the same request: bodies %q / %q, request ids %q / %q", reqs[0].body, reqs[1].body, reqs[0].requestID, reqs[1].requestID)
	}
	if n := sh.orders(t); n != 1 {
		t.Errorf("%d orders in the database, want 1", n)
	}
	if got := sh.s.Order(t, res.Value.OrderID); got.Status != "PENDING_PAYMENT" {
		t.Errorf("order %s is %s", res.Value.OrderID, got.Status)
	}
	sh.wantStock(t, 8, 2)

	t.Run("control: a new key per attempt orders twice", func(t *testing.T) {
		ctl := sh.again(t, 10)
		lossy := &loseAnswers{next: http.DefaultTransport, lose: 1}
		c := ctl.newClient(t, lossy, func(cfg *client.Config) { cfg.MaxAttempts = 1 })
		for range 2 { // the incident's client: give up on the attempt, make a new key, send again
			_, _ = c.CreateOrder(context.Background(), ctl.items(2))
		}
		if n := ctl.orders(t); n != 2 {
			t.Errorf("%d orders after a retry under a new key, want 2 (the control must reproduce I18)", n)
		}
		ctl.wantStock(t, 6, 4)
	})
}

// TestEveryWriteOnceAfterALostAnswer: each keyed write of the contract — cancel, open a
// payment, refund, recharge — has its first answer lost, is retried with the same key, and
// happens once.
func TestEveryWriteOnceAfterALostAnswer(t *testing.T) {
	sh := newShop(t, 10)
	ctx := context.Background()
	plain := sh.newClient(t, http.DefaultTransport)
	lossyClient := func() (*client.Client, *loseAnswers) {
		lossy := &loseAnswers{next: http.DefaultTransport, lose: 1}
		return sh.newClient(t, lossy), lossy
	}
	mustOnce := func(t *testing.T, meta client.Meta, lossy *loseAnswers) {
		t.Helper()
		if meta.Attempts != 2 || !meta.Replayed {
			t.Errorf("result %+v, want a replay on the 2nd attempt", meta)
		}
		if reqs := lossy.all(); len(reqs) != 2 || reqs[0].key != reqs[1].key {
			t.Errorf("requests %+v, want two with one key", reqs)
		}
	}

	t.Run("cancel", func(t *testing.T) {
		o, err := plain.CreateOrder(ctx, sh.items(1))
		if err != nil {
			t.Fatal(err)
		}
		c, lossy := lossyClient()
		res, err := c.CancelOrder(ctx, o.Value.OrderID)
		if err != nil {
			t.Fatal(err)
		}
		mustOnce(t, res.Meta, lossy)
		if res.Value.Status != "CANCELLED" {
			t.Errorf("cancel answered %s", res.Value.Status)
		}
		if n := sh.s.Count(t, "inventory_movements", "order_id = ?", o.Value.OrderID); n != 2 {
			t.Errorf("%d stock movements for the order, want 2 (reserve, release)", n)
		}
		sh.wantStock(t, 10, 0)
	})

	var paid client.Order
	t.Run("open payment", func(t *testing.T) {
		o, err := plain.CreateOrder(ctx, sh.items(1))
		if err != nil {
			t.Fatal(err)
		}
		c, lossy := lossyClient()
		res, err := c.OpenPayment(ctx, o.Value.OrderID)
		if err != nil {
			t.Fatal(err)
		}
		mustOnce(t, res.Meta, lossy)
		if n := sh.s.Count(t, "trades", "order_id = ?", o.Value.OrderID); n != 1 {
			t.Errorf("%d trades for the order, want 1", n)
		}
		if err := sh.s.App.Channel.Pay(o.Value.OrderID); err != nil {
			t.Fatal(err)
		}
		apptest.Eventually(t, 10*time.Second, "the order is paid", func() (bool, string) {
			got, err := plain.Order(ctx, o.Value.OrderID)
			paid = got
			return err == nil && got.Status == "PAID", fmt.Sprint(got.Status, err)
		})
	})

	t.Run("refund", func(t *testing.T) {
		if paid.OrderID == "" {
			t.Skip("no paid order")
		}
		c, lossy := lossyClient()
		res, err := c.CreateRefund(ctx, paid.OrderID, client.RefundRequest{Reason: "lost answer"})
		if err != nil {
			t.Fatal(err)
		}
		mustOnce(t, res.Meta, lossy)
		if res.Value.Amount != paid.Amount {
			t.Errorf("refund of %d, want the whole %d", res.Value.Amount, paid.Amount)
		}
		if n := sh.s.Count(t, "refunds", "order_id = ?", paid.OrderID); n != 1 {
			t.Errorf("%d refunds for the order, want 1", n)
		}
	})

	t.Run("recharge", func(t *testing.T) {
		c, lossy := lossyClient()
		res, err := c.CreateRecharge(ctx, 4200)
		if err != nil {
			t.Fatal(err)
		}
		mustOnce(t, res.Meta, lossy)
		if n := sh.s.Count(t, "recharges", "user_id = ?", sh.userID); n != 1 {
			t.Errorf("%d recharges of the user, want 1", n)
		}
		got, err := plain.Recharge(ctx, res.Value.RechargeID)
		if err != nil || got.Amount != 4200 || got.Status != "PENDING" {
			t.Errorf("recharge %+v, %v", got, err)
		}
	})
}

// TestConcurrentCopiesOfOneKey: many goroutines send one order under one key at once (a
// program's workers resuming the same persisted write); the copies that meet the first in
// flight are answered 409 idempotency_key_in_use and retried after its Retry-After. Every
// caller gets the same order, and the database holds one.
func TestConcurrentCopiesOfOneKey(t *testing.T) {
	sh := newShop(t, 100)
	c := sh.newClient(t, http.DefaultTransport)
	const copies = 20
	key := "concurrent-" + apptest.RandHex(6)
	results := make([]client.Result[client.Order], copies)
	errs := make([]error, copies)
	var wg sync.WaitGroup
	for i := range copies {
		wg.Go(func() { results[i], errs[i] = c.CreateOrder(context.Background(), sh.items(3), client.WithKey(key)) })
	}
	wg.Wait()
	executed := 0
	for i := range copies {
		if errs[i] != nil {
			t.Errorf("copy %d: %v", i, errs[i])
			continue
		}
		if results[i].Value.OrderID != results[0].Value.OrderID {
			t.Errorf("copy %d got order %s, copy 0 %s", i, results[i].Value.OrderID, results[0].Value.OrderID)
		}
		if results[i].Outcome == client.OutcomeExecuted {
			executed++
		}
	}
	if executed != 1 {
		t.Errorf("%d copies say executed, want 1", executed)
	}
	if n := sh.orders(t); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
	sh.wantStock(t, 97, 3)
}

// TestNoRetryOnClientErrors: a 4xx other than 408, 409 in use and 429 is the answer. It is
// returned as a *Problem with the contract's code after ONE attempt, and a refusal the key
// stored is replayed as the same Problem, marked replayed.
func TestNoRetryOnClientErrors(t *testing.T) {
	sh := newShop(t, 1)
	ctx := context.Background()
	cases := []struct {
		name   string
		status int
		code   string
		call   func(c *client.Client) error
	}{
		{"400 unknown_sku", http.StatusBadRequest, "unknown_sku", func(c *client.Client) error {
			_, err := c.CreateOrder(ctx, []client.Item{{SKU: "NO-SUCH-" + apptest.RandHex(3), Quantity: 1}})
			return err
		}},
		{"400 invalid_request", http.StatusBadRequest, "invalid_request", func(c *client.Client) error {
			_, err := c.CreateOrder(ctx, sh.items(0))
			return err
		}},
		{"422 idempotency_key_reused", http.StatusUnprocessableEntity, "idempotency_key_reused", func(c *client.Client) error {
			key := "reused-" + apptest.RandHex(6)
			if _, err := sh.newClient(t, http.DefaultTransport).CreateRecharge(ctx, 100, client.WithKey(key)); err != nil {
				return fmt.Errorf("first use of the key: %w", err)
			}
			_, err := c.CreateRecharge(ctx, 200, client.WithKey(key))
			return err
		}},
		{"409 out_of_stock", http.StatusConflict, "out_of_stock", func(c *client.Client) error {
			_, err := c.CreateOrder(ctx, sh.items(5))
			return err
		}},
		{"404 not_found", http.StatusNotFound, "not_found", func(c *client.Client) error {
			_, err := c.CancelOrder(ctx, "1")
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &gateway{next: http.DefaultTransport}
			err := tc.call(sh.newClient(t, rec))
			var p *client.Problem
			if !errors.As(err, &p) {
				t.Fatalf("error %v (%T), want a *client.Problem", err, err)
			}
			if p.Status != tc.status || p.Code != tc.code || !client.IsCode(err, tc.code) {
				t.Errorf("problem %d %q, want %d %q", p.Status, p.Code, tc.status, tc.code)
			}
			if n := len(rec.all()); n != 1 || p.Meta.Attempts != 1 {
				t.Errorf("%d requests sent (attempts %d), want exactly 1", n, p.Meta.Attempts)
			}
			if errors.Is(err, client.ErrIndefinite) {
				t.Errorf("a final refusal reads as indefinite: %v", err)
			}
		})
	}

	t.Run("a stored refusal is replayed", func(t *testing.T) {
		c := sh.newClient(t, http.DefaultTransport)
		key := "oos-" + apptest.RandHex(6)
		_, first := c.CreateOrder(ctx, sh.items(5), client.WithKey(key))
		_, again := c.CreateOrder(ctx, sh.items(5), client.WithKey(key))
		var p1, p2 *client.Problem
		if !errors.As(first, &p1) || !errors.As(again, &p2) {
			t.Fatalf("errors %v / %v, want two problems", first, again)
		}
		if p1.Code != "out_of_stock" || p1.Meta.Replayed || !p2.Meta.Replayed || p2.Code != "out_of_stock" || p2.Meta.Key != key {
			t.Errorf("first %s %+v, again %s %+v: want out_of_stock executed, then replayed", p1.Code, p1.Meta, p2.Code, p2.Meta)
		}
	})
}

// TestRetryAfterIsHonoured: a 503 or a 409 idempotency_key_in_use with Retry-After: 1 makes
// the client wait at least a second, although its own backoff is 20 ms, and then the same
// key reaches oncepay and orders once.
func TestRetryAfterIsHonoured(t *testing.T) {
	sh := newShop(t, 10)
	for _, a := range []fakeAnswer{
		{status: http.StatusServiceUnavailable, code: "unavailable", retryAfter: "1"},
		{status: http.StatusConflict, code: "idempotency_key_in_use", retryAfter: "1"},
	} {
		t.Run(fmt.Sprint(a.status, " ", a.code), func(t *testing.T) {
			before := sh.orders(t)
			gw := &gateway{next: http.DefaultTransport, answers: []fakeAnswer{a}}
			res, err := sh.newClient(t, gw).CreateOrder(context.Background(), sh.items(1))
			if err != nil {
				t.Fatal(err)
			}
			reqs := gw.all()
			if len(reqs) != 2 || res.Attempts != 2 || res.Replayed {
				t.Fatalf("%d requests, result %+v: want the 2nd attempt to execute", len(reqs), res.Meta)
			}
			if gap := reqs[1].at.Sub(reqs[0].at); gap < time.Second {
				t.Errorf("the retry left %s after the %d, want at least the Retry-After of 1s", gap, a.status)
			}
			if reqs[0].key != reqs[1].key {
				t.Errorf("keys %q then %q", reqs[0].key, reqs[1].key)
			}
			if n := sh.orders(t) - before; n != 1 {
				t.Errorf("%d orders, want 1", n)
			}
		})
	}
}

// TestDeadlineIsRespected: a server that never answers is given up on by the deadline, with
// an IndefiniteError that names the key to retry with; a Retry-After beyond the deadline is
// given up on at once rather than slept into.
func TestDeadlineIsRespected(t *testing.T) {
	sh := newShop(t, 10)
	t.Run("never answers", func(t *testing.T) {
		hole := &blackHole{}
		c := sh.newClient(t, hole, func(cfg *client.Config) {
			cfg.AttemptTimeout, cfg.Deadline = 200*time.Millisecond, time.Second
		})
		start := time.Now()
		_, err := c.CreateOrder(context.Background(), sh.items(1))
		took := time.Since(start)
		var ie *client.IndefiniteError
		if !errors.As(err, &ie) || !errors.Is(err, client.ErrIndefinite) {
			t.Fatalf("error %v (%T), want an *client.IndefiniteError", err, err)
		}
		if took < 900*time.Millisecond || took > 1500*time.Millisecond {
			t.Errorf("gave up after %s, want about the 1s deadline", took)
		}
		reqs := hole.all()
		if ie.Attempts < 3 || len(reqs) != ie.Attempts || ie.Key == "" || reqs[0].key != ie.Key || reqs[len(reqs)-1].key != ie.Key {
			t.Errorf("attempts %d, %d requests, key %q: want several attempts, all with the error's key", ie.Attempts, len(reqs), ie.Key)
		}
	})
	t.Run("Retry-After past the deadline", func(t *testing.T) {
		gw := &gateway{next: http.DefaultTransport, answers: []fakeAnswer{{status: http.StatusServiceUnavailable, code: "unavailable", retryAfter: "30"}}}
		c := sh.newClient(t, gw, func(cfg *client.Config) { cfg.Deadline = 2 * time.Second })
		start := time.Now()
		_, err := c.CreateOrder(context.Background(), sh.items(1))
		var ie *client.IndefiniteError
		if !errors.As(err, &ie) || !client.IsCode(err, "unavailable") {
			t.Fatalf("error %v, want an IndefiniteError whose last answer was 503 unavailable", err)
		}
		if took := time.Since(start); took > 500*time.Millisecond {
			t.Errorf("took %s to give up on a Retry-After of 30s with a 2s deadline", took)
		}
		if n := len(gw.all()); n != 1 {
			t.Errorf("%d requests, want 1", n)
		}
	})
	t.Run("the caller's context", func(t *testing.T) {
		hole := &blackHole{}
		c := sh.newClient(t, hole)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := c.CreateOrder(ctx, sh.items(1))
		if !errors.Is(err, client.ErrIndefinite) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %v, want indefinite and the context's deadline", err)
		}
	})
}

// TestBeforeSendSeesTheKeyFirst: the hook gets the key before anything leaves — oncepay has
// no record of it yet — and the attempts carry that key; a hook that fails sends nothing.
func TestBeforeSendSeesTheKeyFirst(t *testing.T) {
	sh := newShop(t, 10)
	var (
		hooked    client.Write
		sentFirst atomic.Int64
		records   int64 = -1
	)
	lossy := &loseAnswers{next: http.DefaultTransport, lose: 1}
	c := sh.newClient(t, lossy, func(cfg *client.Config) {
		cfg.NewKey = func() (string, error) { return "persisted-" + apptest.RandHex(6), nil }
		cfg.BeforeSend = func(_ context.Context, w client.Write) error {
			hooked = w
			sentFirst.Store(int64(len(lossy.all())))
			records = sh.s.Count(t, "idempotency_records", "biz_key = ?", w.Key)
			return nil
		}
	})
	res, err := c.CreateOrder(context.Background(), sh.items(1))
	if err != nil {
		t.Fatal(err)
	}
	reqs := lossy.all()
	if hooked.Key == "" || hooked.Key != res.Key || reqs[0].key != hooked.Key || reqs[1].key != hooked.Key {
		t.Errorf("hook saw key %q, result %q, requests %q and %q", hooked.Key, res.Key, reqs[0].key, reqs[1].key)
	}
	if !bytes.Equal(hooked.Body, reqs[0].body) || hooked.Method != http.MethodPost || hooked.Path != "/v1/orders" {
		t.Errorf("hook saw %s %s %q, the request was %q", hooked.Method, hooked.Path, hooked.Body, reqs[0].body)
	}
	if n := sentFirst.Load(); n != 0 || records != 0 {
		t.Errorf("when the hook ran, %d requests had left and oncepay held %d records of the key; want 0 and 0", n, records)
	}
	if n := sh.s.Count(t, "idempotency_records", "biz_key = ?", hooked.Key); n != 1 {
		t.Errorf("%d records of the key after the call, want 1 (is the hook's check looking at the right rows?)", n)
	}

	t.Run("a failing hook sends nothing", func(t *testing.T) {
		before := sh.orders(t)
		rec := &gateway{next: http.DefaultTransport}
		c := sh.newClient(t, rec, func(cfg *client.Config) {
			cfg.BeforeSend = func(context.Context, client.Write) error { return errors.New("disk full") }
		})
		_, err := c.CreateOrder(context.Background(), sh.items(1))
		if err == nil || errors.Is(err, client.ErrIndefinite) {
			t.Errorf("error %v, want the hook's", err)
		}
		if n := len(rec.all()); n != 0 {
			t.Errorf("%d requests sent although the hook failed", n)
		}
		if n := sh.orders(t) - before; n != 0 {
			t.Errorf("%d orders made although the hook failed", n)
		}
	})
}

// TestOneTimeTokenAsKey: a form's one-time token (I7) is the key of its submission; two
// submissions of it, the first one's answer lost, make one order.
func TestOneTimeTokenAsKey(t *testing.T) {
	sh := newShop(t, 10)
	ctx := context.Background()
	tok, err := sh.newClient(t, http.DefaultTransport).Token(ctx)
	if err != nil || len(tok.Token) < 5 || tok.Token[:4] != "tok_" {
		t.Fatalf("token %+v, %v", tok, err)
	}
	lossy := &loseAnswers{next: http.DefaultTransport, lose: 1}
	res, err := sh.newClient(t, lossy).CreateOrder(ctx, sh.items(1), client.WithKey(tok.Token))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Replayed || res.Attempts != 2 {
		t.Errorf("result %+v, want a replay on the 2nd attempt", res.Meta)
	}
	if n := sh.orders(t); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
}

// TestNothingIsSentForABadKeyOrRequest: a key the contract would refuse, a NewKey that makes a
// one-time token's prefix, and a request that cannot be built are errors before anything
// leaves — none of them an IndefiniteError, since nothing can have happened.
func TestNothingIsSentForABadKeyOrRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  string
		make func() (string, error)
		req  client.Request
	}{
		{name: "a space in the key", key: "two words", req: client.Request{Method: http.MethodPost, Path: "/v1/orders", Keyed: true}},
		{name: "a key over 255 bytes", key: string(bytes.Repeat([]byte("k"), 256)), req: client.Request{Method: http.MethodPost, Path: "/v1/orders", Keyed: true}},
		{name: "NewKey makes tok_", make: func() (string, error) { return "tok_guess", nil }, req: client.Request{Method: http.MethodPost, Path: "/v1/orders", Keyed: true}},
		{name: "an unbuildable request", req: client.Request{Method: "BAD METHOD", Path: "/v1/orders"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &blackHole{}
			c, err := client.New(client.Config{BaseURL: "http://127.0.0.1:9", Transport: rec, NewKey: tc.make})
			if err != nil {
				t.Fatal(err)
			}
			var opts []client.CallOption
			if tc.key != "" {
				opts = append(opts, client.WithKey(tc.key))
			}
			_, err = c.Do(context.Background(), tc.req, opts...)
			if err == nil || errors.Is(err, client.ErrIndefinite) {
				t.Errorf("error %v, want a plain error", err)
			}
			if n := len(rec.all()); n != 0 {
				t.Errorf("%d requests sent", n)
			}
		})
	}
}
