//go:build unix

package app_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/oncepay/oncepay/internal/channelsim"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// chromiumPath is where Debian's chromium package puts the browser; CI installs it.
const chromiumPath = "/usr/bin/chromium"

// chromiumStartTimeout bounds the start of the browser and of its first tab. A loaded CI
// runner with two cores has needed more than 15 s for it.
const chromiumStartTimeout = 60 * time.Second

// chromiumCommandTimeout bounds one action in the page, such as an evaluation or a navigation.
const chromiumCommandTimeout = 15 * time.Second

// TestCashierPageInChromiumDoubleClickPaysOnce opens a trade the way a shop does, loads its
// pay_url — the simulator's cashier page — in headless Chromium and double-clicks Pay with
// real mouse input (chromedp's MouseEvent, that is Input.dispatchMouseEvent of the DevTools
// protocol: trusted events that go through hit testing, as a person's clicks do). The order
// must become PAID once: one payments row, one unit sold, one SUCCESS trade at the channel, one
// POST /pay from the page; and the page itself must show the notification the simulator sent
// back to oncepay, acknowledged.
func TestCashierPageInChromiumDoubleClickPaysOnce(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing but CI=true: CI must install it (apt-get install -y chromium)", chromiumPath)
		}
		t.Skipf("%s is not installed (apt-get install -y chromium); CI runs this test", chromiumPath)
	}
	start := time.Now()
	s := channelServer(t)
	before := s.Inventory(t, "SKU-1002")
	o, tv := openTrade(t, s, "chromium", "SKU-1002")
	if !strings.HasPrefix(tv.PayURL, s.App.ChannelURL+"/sim/cashier/") {
		t.Fatalf("pay_url %q is not the embedded simulator's cashier page (%s/sim/cashier/…)", tv.PayURL, s.App.ChannelURL)
	}

	// A page of another site cannot pay the trade in the buyer's name: the simulator's pay
	// action refuses a cross-site Origin, and the trade stays payable from its own page.
	payAction := s.App.ChannelURL + "/sim/trades/" + o.OrderID + "/pay"
	for _, h := range []map[string]string{{"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}} {
		req, err := http.NewRequest(http.MethodPost, payAction, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range h {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("cross-site pay: %v", err)
		}
		_ = res.Body.Close()
		if res.StatusCode != http.StatusForbidden {
			t.Errorf("a cross-site pay (%v) answered %d, want 403", h, res.StatusCode)
		}
	}
	if st := channelTrade(t, s, o.OrderID).Status; st != channelsim.TradeWaitBuyerPay {
		t.Fatalf("the trade is %s after cross-site pay attempts, want WAIT_BUYER_PAY", st)
	}

	page := openInChromium(t, tv.PayURL)

	// The page is ready when its button is there and enabled (the trade is WAIT_BUYER_PAY).
	type payButton struct {
		X, Y     float64
		Disabled bool
		Status   string
	}
	var box payButton
	apptest.Eventually(t, 10*time.Second, "the cashier page loaded with an enabled Pay button", func() (bool, string) {
		b := evalIn[*payButton](t, page, `(() => {
			const b = document.getElementById("pay");
			if (document.readyState !== "complete" || !b) return null;
			const r = b.getBoundingClientRect();
			return {X: r.left + r.width / 2, Y: r.top + r.height / 2, Disabled: b.disabled,
				Status: document.getElementById("status").textContent};
		})()`)
		if b == nil {
			return false, "not loaded"
		}
		box = *b
		return !box.Disabled && box.Status == "WAIT_BUYER_PAY", fmt.Sprintf("%+v", box)
	})
	if title := evalIn[string](t, page, `document.title`); !strings.Contains(title, o.OrderID) {
		t.Errorf("page title %q does not name the trade %s", title, o.OrderID)
	}

	// A fast double click: press, release, press, release (clickCount 1 then 2), each with the
	// left button (buttons = 1). chromedp sends an event once the browser answered the one
	// before, and the browser answers Input.dispatchMouseEvent once the page acknowledged the
	// event, so the four events reach the page in order and back to back. The page counts the
	// presses it received, to show that both reached it.
	evalIn[bool](t, page, `window.__presses = 0; window.addEventListener("pointerdown", () => window.__presses++, true); true`)
	leftHeld := func(p *input.DispatchMouseEventParams) { p.Buttons = 1 }
	var clicks []chromedp.Action[chromedp.Void]
	for _, n := range []int{1, 2} {
		for _, typ := range []input.DispatchMouseEventType{chromedp.MousePressed, chromedp.MouseReleased} {
			clicks = append(clicks, chromedp.MouseEvent(typ, box.X, box.Y, chromedp.ButtonLeft, chromedp.ClickCount(n), leftHeld))
		}
	}
	runIn(t, page, "double click on Pay", chromedp.Steps(clicks...))

	if presses := evalIn[int](t, page, `window.__presses`); presses != 2 {
		t.Errorf("the page received %d presses of the double click, want 2", presses)
	}
	waitStatus(t, s, o.OrderID, order.Paid)

	// The page shows the notification attempt(s): the simulator delivered the notification to
	// oncepay, whose answer was 200 {"result":"success"}, and the page's poll rendered it.
	var text string
	apptest.Eventually(t, 10*time.Second, "the cashier page shows the delivered notification", func() (bool, string) {
		v := evalIn[struct {
			Text string
			OK   int
			Rows int
		}](t, page, `({Text: document.body.innerText,
			OK: document.querySelectorAll("#attempts td.ok").length,
			Rows: document.querySelectorAll("#attempts tr").length})`)
		text = v.Text
		ok := v.Rows >= 1 && v.OK >= 1 && strings.Contains(v.Text, channelsim.NotificationDelivered) &&
			strings.Contains(v.Text, `200 {"result":"success"}`) && strings.Contains(v.Text, "status "+channelsim.TradeSuccess)
		return ok, fmt.Sprintf("%d rows, %d ok; text %q", v.Rows, v.OK, v.Text)
	})
	t.Logf("cashier page after the double click:\n%s", text)
	if !evalIn[bool](t, page, `document.getElementById("pay").disabled`) {
		t.Errorf("the Pay button of a paid trade is enabled")
	}
	if msg := evalIn[string](t, page, `document.getElementById("error").textContent`); msg != "" {
		t.Errorf("the page shows an error: %q", msg)
	}
	// Once: one POST from the page (the first click disables the button), one payment, one
	// unit sold, one SUCCESS trade at the channel, one notification, acknowledged.
	if posts := page.payPosts(); len(posts) != 1 {
		t.Errorf("the page sent %d POST …/pay for a double click, want 1: %v", len(posts), posts)
	}
	if errs := page.exceptions(); len(errs) > 0 {
		t.Errorf("the page threw: %v", errs)
	}
	orderID, _ := ids.Parse(o.OrderID)
	if n := s.Count(t, "payments", "order_id = ?", orderID); n != 1 {
		t.Errorf("%d payments rows for order %s, want 1", n, o.OrderID)
	}
	if n := s.Count(t, "payments", "channel = ? AND trade_no = ?", tv.Channel, tv.TradeNo); n != 1 {
		t.Errorf("%d payments rows for trade %s %s, want 1", n, tv.Channel, tv.TradeNo)
	}
	after := s.Inventory(t, "SKU-1002")
	if after.Sold != before.Sold+1 || after.Reserved != before.Reserved || after.Available != before.Available-1 {
		t.Errorf("stock %+v after one paid unit, was %+v", after, before)
	}
	st := s.App.Channel.State()
	var trades, notes []string
	for _, tr := range st.Trades {
		if tr.OutTradeNo == o.OrderID {
			trades = append(trades, tr.TradeNo+" "+tr.Status)
		}
	}
	for _, n := range st.Notifications {
		if n.OutTradeNo == o.OrderID {
			notes = append(notes, n.Kind+" "+n.Status)
		}
	}
	if len(trades) != 1 || trades[0] != tv.TradeNo+" "+channelsim.TradeSuccess {
		t.Errorf("the channel's trades for %s: %v, want [%s %s]", o.OrderID, trades, tv.TradeNo, channelsim.TradeSuccess)
	}
	if len(notes) != 1 || !strings.HasSuffix(notes[0], " "+channelsim.NotificationDelivered) {
		t.Errorf("the channel's notifications for %s: %v, want one %s", o.OrderID, notes, channelsim.NotificationDelivered)
	}
	t.Logf("paid through the cashier page in %s", time.Since(start).Round(time.Millisecond))
}

// chromiumPage is a tab of headless Chromium that chromedp drives. It keeps the POST requests
// to …/pay that the page sent and the exceptions that it did not catch.
type chromiumPage struct {
	ctx context.Context // the chromedp context of the tab and of its browser

	mu     sync.Mutex
	posts  []string // guarded by mu
	thrown []string // guarded by mu
}

// openInChromium starts headless Chromium and loads pageURL in its tab. The browser stops, and
// chromedp kills what is left of its processes and removes its profile, when the test ends.
func openInChromium(t *testing.T, pageURL string) *chromiumPage {
	t.Helper()
	home := t.TempDir() // removed after the browser stopped: cleanups run last-registered first
	var output chromiumOutput
	// The default options run the browser headless; no-sandbox lets it run as root.
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true),
		chromedp.WindowSize(1000, 800),
		chromedp.Env("HOME="+home), // nothing of the user's profile is read or written
		chromedp.CombinedOutput(&output))
	// The browser lives as long as base, so a start that takes too long can be stopped.
	base, stop := context.WithCancel(context.Background())
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(base, opts...)
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelCtx() // waits until the browser exited and its profile is removed
		cancelAlloc()
		stop()
	})

	timer := time.AfterFunc(chromiumStartTimeout, stop)
	err := chromedp.Do(ctx) // starts the browser and attaches to its tab
	if !timer.Stop() {
		t.Fatalf("chromium did not start within %s (%v):\n%s", chromiumStartTimeout, err, output.String())
	}
	if err != nil {
		t.Fatalf("start chromium: %v\n%s", err, output.String())
	}

	p := &chromiumPage{ctx: ctx}
	if err := chromedp.Listen(ctx, p.record); err != nil {
		t.Fatalf("listen to the page's events: %v", err)
	}
	runIn(t, p, "open "+pageURL, chromedp.Navigate(pageURL))
	return p
}

// record keeps the events that the test checks. chromedp calls it in the loop that reads the
// tab's messages, so it returns at once.
func (p *chromiumPage) record(ev any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch ev := ev.(type) {
	case *network.EventRequestWillBeSent:
		if ev.Request.Method == http.MethodPost && strings.HasSuffix(ev.Request.URL, "/pay") {
			p.posts = append(p.posts, ev.Request.URL)
		}
	case *runtime.EventExceptionThrown:
		p.thrown = append(p.thrown, (&chromedp.ExceptionError{ExceptionDetails: ev.ExceptionDetails}).Error())
	}
}

// payPosts lists the POST requests to …/pay that the page sent.
func (p *chromiumPage) payPosts() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.posts...)
}

// exceptions lists the uncaught exceptions of the page.
func (p *chromiumPage) exceptions() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.thrown...)
}

// runIn runs the action in the page and returns its value. It fails the test when the action
// fails or takes longer than chromiumCommandTimeout.
func runIn[T any](t *testing.T, p *chromiumPage, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, chromiumCommandTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("chromium: %s: %v", what, err)
	}
	return v
}

// evalIn evaluates the JavaScript expression in the page and decodes its value into T. A null
// value decodes into a nil pointer; an exception fails the test.
func evalIn[T any](t *testing.T, p *chromiumPage, expr string) T {
	t.Helper()
	return runIn(t, p, "evaluate "+expr, chromedp.Evaluate[T](expr))
}

// chromiumOutput keeps what the browser prints, for the message of a start that failed. The
// allocator writes to it from its own goroutine.
type chromiumOutput struct {
	mu  sync.Mutex
	buf strings.Builder
}

// Write appends p to the output.
func (o *chromiumOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

// String returns the output so far.
func (o *chromiumOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}
