//go:build unix

package app_test

import (
	"bufio"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/channelsim"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// chromiumPath is where Debian's chromium package puts the browser; CI installs it.
const chromiumPath = "/usr/bin/chromium"

// TestCashierPageInChromiumDoubleClickPaysOnce opens a trade the way a shop does, loads its
// pay_url — the simulator's cashier page — in headless Chromium and double-clicks Pay with
// real mouse input (Chrome DevTools protocol, Input.dispatchMouseEvent: trusted events that go
// through hit testing, as a person's clicks do). The order must become PAID once: one payments
// row, one unit sold, one SUCCESS trade at the channel, one POST /pay from the page; and the
// page itself must show the notification the simulator sent back to oncepay, acknowledged.
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
	page.call(t, "Runtime.enable", nil)
	page.call(t, "Network.enable", nil)

	// The page is ready when its button is there and enabled (the trade is WAIT_BUYER_PAY).
	var box struct {
		X, Y     float64
		Disabled bool
		Status   string
	}
	apptest.Eventually(t, 10*time.Second, "the cashier page loaded with an enabled Pay button", func() (bool, string) {
		raw := page.eval(t, `(() => {
			const b = document.getElementById("pay");
			if (document.readyState !== "complete" || !b) return null;
			const r = b.getBoundingClientRect();
			return {X: r.left + r.width / 2, Y: r.top + r.height / 2, Disabled: b.disabled,
				Status: document.getElementById("status").textContent};
		})()`)
		if string(raw) == "null" || json.Unmarshal(raw, &box) != nil {
			return false, "not loaded: " + string(raw)
		}
		return !box.Disabled && box.Status == "WAIT_BUYER_PAY", string(raw)
	})
	if title := string(page.eval(t, `document.title`)); !strings.Contains(title, o.OrderID) {
		t.Errorf("page title %s does not name the trade %s", title, o.OrderID)
	}

	// A fast double click: press, release, press, release (clickCount 1 then 2), sent back to
	// back without waiting for the browser's answers in between. The page counts the presses
	// it received, to show that both reached it.
	page.eval(t, `window.__presses = 0; window.addEventListener("pointerdown", () => window.__presses++, true); true`)
	var sent []int64
	for _, click := range []int{1, 2} {
		for _, typ := range []string{"mousePressed", "mouseReleased"} {
			sent = append(sent, page.send(t, "Input.dispatchMouseEvent", map[string]any{
				"type": typ, "x": box.X, "y": box.Y, "button": "left", "buttons": 1, "clickCount": click,
			}))
		}
	}
	for _, id := range sent {
		page.wait(t, id)
	}

	if presses := string(page.eval(t, `window.__presses`)); presses != "2" {
		t.Errorf("the page received %s presses of the double click, want 2", presses)
	}
	waitStatus(t, s, o.OrderID, order.Paid)

	// The page shows the notification attempt(s): the simulator delivered the notification to
	// oncepay, whose answer was 200 {"result":"success"}, and the page's poll rendered it.
	var text string
	apptest.Eventually(t, 10*time.Second, "the cashier page shows the delivered notification", func() (bool, string) {
		var v struct {
			Text string
			OK   int
			Rows int
		}
		raw := page.eval(t, `({Text: document.body.innerText,
			OK: document.querySelectorAll("#attempts td.ok").length,
			Rows: document.querySelectorAll("#attempts tr").length})`)
		if err := json.Unmarshal(raw, &v); err != nil {
			return false, string(raw)
		}
		text = v.Text
		ok := v.Rows >= 1 && v.OK >= 1 && strings.Contains(v.Text, channelsim.NotificationDelivered) &&
			strings.Contains(v.Text, `200 {"result":"success"}`) && strings.Contains(v.Text, "status "+channelsim.TradeSuccess)
		return ok, fmt.Sprintf("%d rows, %d ok; text %q", v.Rows, v.OK, v.Text)
	})
	t.Logf("cashier page after the double click:\n%s", text)
	if disabled := string(page.eval(t, `document.getElementById("pay").disabled`)); disabled != "true" {
		t.Errorf("the Pay button of a paid trade is enabled (disabled = %s)", disabled)
	}
	if msg := string(page.eval(t, `document.getElementById("error").textContent`)); msg != `""` {
		t.Errorf("the page shows an error: %s", msg)
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

// openInChromium starts headless Chromium on pageURL with its DevTools endpoint on a free port
// of 127.0.0.1 and returns a session attached to that page. The browser (its whole process
// group) is stopped, and waited for, when the test ends.
func openInChromium(t *testing.T, pageURL string) *cdpSession {
	t.Helper()
	dir := t.TempDir() // removed after the browser stopped: cleanups run last-registered first
	cmd := exec.Command(chromiumPath, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--window-size=1000,800",
		"--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", pageURL)
	cmd.Env = append(os.Environ(), "HOME="+dir) // nothing of the user's profile is read or written
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	exited := make(chan struct{})
	var logMu sync.Mutex
	var log strings.Builder
	endpoint := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			logMu.Lock()
			log.WriteString(line + "\n")
			logMu.Unlock()
			if rest, ok := strings.CutPrefix(line, "DevTools listening on "); ok {
				select {
				case endpoint <- rest:
				default:
				}
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	chromiumLog := func() string {
		logMu.Lock()
		defer logMu.Unlock()
		return log.String()
	}
	t.Cleanup(func() {
		pgid := cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-exited
		}
		// Helpers (zygote, renderer) share the group; make sure none outlives the test.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	})

	var browserWS string
	select {
	case browserWS = <-endpoint:
	case <-exited:
		t.Fatalf("chromium exited before its DevTools endpoint was up:\n%s", chromiumLog())
	case <-time.After(15 * time.Second):
		t.Fatalf("chromium did not announce its DevTools endpoint within 15s:\n%s", chromiumLog())
	}
	u, err := url.Parse(browserWS)
	if err != nil {
		t.Fatalf("DevTools endpoint %q: %v", browserWS, err)
	}

	// The page's own target, found by its URL in /json/list.
	var wsURL string
	apptest.Eventually(t, 10*time.Second, "the cashier page's DevTools target", func() (bool, string) {
		res, err := http.Get("http://" + u.Host + "/json/list")
		if err != nil {
			return false, err.Error()
		}
		defer res.Body.Close()
		var targets []struct{ Type, URL, WebSocketDebuggerURL string }
		if err := json.NewDecoder(res.Body).Decode(&targets); err != nil {
			return false, err.Error()
		}
		for _, tg := range targets {
			if tg.Type == "page" && tg.URL == pageURL && tg.WebSocketDebuggerURL != "" {
				wsURL = tg.WebSocketDebuggerURL
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", targets)
	})
	ws, err := dialWebSocket(wsURL, 10*time.Second)
	if err != nil {
		t.Fatalf("DevTools WebSocket %s: %v\n%s", wsURL, err, chromiumLog())
	}
	t.Cleanup(func() { _ = ws.Close() })
	return &cdpSession{ws: ws, answers: map[int64]cdpMessage{}}
}

// cdpSession is one Chrome DevTools protocol session over a page target's WebSocket. It is
// driven from the test's goroutine only: it reads from the socket while it waits for an
// answer, keeping the events that arrive meanwhile.
type cdpSession struct {
	ws      *wsConn
	next    int64
	answers map[int64]cdpMessage
	events  []cdpMessage
}

// cdpMessage is a command's answer (ID set) or an event (Method set).
type cdpMessage struct {
	ID     int64           `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// send sends a command without waiting for its answer and returns its id.
func (c *cdpSession) send(t *testing.T, method string, params any) int64 {
	t.Helper()
	c.next++
	msg, err := json.Marshal(map[string]any{"id": c.next, "method": method, "params": params})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ws.WriteText(msg, 10*time.Second); err != nil {
		t.Fatalf("DevTools %s: %v", method, err)
	}
	return c.next
}

// wait reads until the answer of command id came, failing the test on a protocol error.
func (c *cdpSession) wait(t *testing.T, id int64) json.RawMessage {
	t.Helper()
	for {
		if m, ok := c.answers[id]; ok {
			delete(c.answers, id)
			if m.Error != nil {
				t.Fatalf("DevTools command %d: %d %s", id, m.Error.Code, m.Error.Message)
			}
			return m.Result
		}
		raw, err := c.ws.ReadMessage(15 * time.Second)
		if err != nil {
			t.Fatalf("DevTools: waiting for the answer to command %d: %v", id, err)
		}
		var m cdpMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("DevTools sent %q: %v", raw, err)
		}
		if m.Method != "" {
			c.events = append(c.events, m)
		} else {
			c.answers[m.ID] = m
		}
	}
}

// call sends a command and waits for its answer.
func (c *cdpSession) call(t *testing.T, method string, params any) json.RawMessage {
	t.Helper()
	return c.wait(t, c.send(t, method, params))
}

// eval evaluates a JavaScript expression in the page and returns its value as JSON.
func (c *cdpSession) eval(t *testing.T, expr string) json.RawMessage {
	t.Helper()
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	raw := c.call(t, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true})
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("Runtime.evaluate answered %s: %v", raw, err)
	}
	if e := res.ExceptionDetails; e != nil {
		t.Fatalf("evaluating %q: %s %s", expr, e.Text, e.Exception.Description)
	}
	if len(res.Result.Value) == 0 {
		return json.RawMessage("undefined")
	}
	return res.Result.Value
}

// payPosts lists the POST requests to …/pay the page sent (Network.requestWillBeSent events).
func (c *cdpSession) payPosts() []string {
	var posts []string
	for _, e := range c.events {
		if e.Method != "Network.requestWillBeSent" {
			continue
		}
		var p struct {
			Request struct{ URL, Method string } `json:"request"`
		}
		if json.Unmarshal(e.Params, &p) == nil && p.Request.Method == http.MethodPost && strings.HasSuffix(p.Request.URL, "/pay") {
			posts = append(posts, p.Request.URL)
		}
	}
	return posts
}

// exceptions lists the page's uncaught exceptions (Runtime.exceptionThrown events).
func (c *cdpSession) exceptions() []string {
	var errs []string
	for _, e := range c.events {
		if e.Method == "Runtime.exceptionThrown" {
			errs = append(errs, string(e.Params))
		}
	}
	return errs
}

// wsConn is the client side of an RFC 6455 WebSocket, just enough for the DevTools protocol:
// text messages (possibly fragmented), pings answered, no extension.
type wsConn struct {
	conn net.Conn
	r    *bufio.Reader
}

// wsGUID is RFC 6455's key suffix for Sec-WebSocket-Accept.
const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// dialWebSocket opens a ws:// URL. It sends no Origin header: Chromium's DevTools endpoint
// accepts such clients without --remote-allow-origins.
func dialWebSocket(rawURL string, timeout time.Duration) (*wsConn, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "ws" {
		return nil, fmt.Errorf("scheme %q, want ws", u.Scheme)
	}
	conn, err := net.DialTimeout("tcp", u.Host, timeout)
	if err != nil {
		return nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(timeout))
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	key := base64.StdEncoding.EncodeToString(nonce[:])
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", u.RequestURI(), u.Host, key)
	r := bufio.NewReader(conn)
	res, err := http.ReadResponse(r, &http.Request{Method: http.MethodGet})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("handshake: %w", err)
	}
	sum := sha1.Sum([]byte(key + wsGUID))
	if res.StatusCode != http.StatusSwitchingProtocols || res.Header.Get("Sec-WebSocket-Accept") != base64.StdEncoding.EncodeToString(sum[:]) {
		body, _ := io.ReadAll(io.LimitReader(res.Body, 1024))
		conn.Close()
		return nil, fmt.Errorf("handshake refused: %s %s", res.Status, body)
	}
	_ = conn.SetDeadline(time.Time{})
	return &wsConn{conn: conn, r: r}, nil
}

// WriteText sends one text message in one masked frame (a client masks every frame).
func (c *wsConn) WriteText(payload []byte, timeout time.Duration) error {
	return c.writeFrame(0x1, payload, timeout)
}

func (c *wsConn) writeFrame(opcode byte, payload []byte, timeout time.Duration) error {
	header := []byte{0x80 | opcode} // FIN
	switch n := len(payload); {
	case n < 126:
		header = append(header, 0x80|byte(n))
	case n <= 0xffff:
		header = append(header, 0x80|126)
		header = binary.BigEndian.AppendUint16(header, uint16(n))
	default:
		header = append(header, 0x80|127)
		header = binary.BigEndian.AppendUint64(header, uint64(n))
	}
	var mask [4]byte
	_, _ = rand.Read(mask[:])
	header = append(header, mask[:]...)
	frame := make([]byte, 0, len(header)+len(payload))
	frame = append(frame, header...)
	for i, b := range payload {
		frame = append(frame, b^mask[i%4])
	}
	_ = c.conn.SetWriteDeadline(time.Now().Add(timeout))
	_, err := c.conn.Write(frame)
	return err
}

// ReadMessage returns the next text message, answering pings on the way.
func (c *wsConn) ReadMessage(timeout time.Duration) ([]byte, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(timeout))
	var msg []byte
	for {
		var head [2]byte
		if _, err := io.ReadFull(c.r, head[:]); err != nil {
			return nil, err
		}
		fin, opcode := head[0]&0x80 != 0, head[0]&0x0f
		if head[1]&0x80 != 0 {
			return nil, errors.New("the server sent a masked frame")
		}
		n := uint64(head[1] & 0x7f)
		switch n {
		case 126:
			var ext [2]byte
			if _, err := io.ReadFull(c.r, ext[:]); err != nil {
				return nil, err
			}
			n = uint64(binary.BigEndian.Uint16(ext[:]))
		case 127:
			var ext [8]byte
			if _, err := io.ReadFull(c.r, ext[:]); err != nil {
				return nil, err
			}
			n = binary.BigEndian.Uint64(ext[:])
		}
		if n > 64<<20 {
			return nil, fmt.Errorf("a %d-byte frame", n)
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(c.r, payload); err != nil {
			return nil, err
		}
		switch opcode {
		case 0x0, 0x1, 0x2: // continuation, text, binary
			msg = append(msg, payload...)
			if fin {
				return msg, nil
			}
		case 0x8:
			return nil, fmt.Errorf("the server closed the WebSocket: %q", payload)
		case 0x9:
			if err := c.writeFrame(0xA, payload, timeout); err != nil {
				return nil, err
			}
		case 0xA: // an unsolicited pong
		default:
			return nil, fmt.Errorf("unknown opcode %#x", opcode)
		}
	}
}

// Close sends a close frame and closes the connection.
func (c *wsConn) Close() error {
	_ = c.writeFrame(0x8, []byte{0x03, 0xe8}, time.Second) // 1000 normal closure
	return c.conn.Close()
}
