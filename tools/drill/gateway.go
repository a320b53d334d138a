package drill

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/oncepay/oncepay/deploy"
)

// I11 is a gateway in front of two instances that times out on a slow POST and sends it again
// to the next instance, with the same X-Request-Id and Idempotency-Key. The drill talks to one
// server, so the two instances are two doors to it: two small proxies of the drill's own
// (gatewayInstance), the upstreams of the gateway, each passing every request on to the server
// at once. The first copy that reaches either has its answer — the work done — held back past
// the gateway's read timeout, as an instance's is behind a GC pause or a full socket buffer;
// the gateway gives up on it and sends the POST to the other one. oncepay's instances share
// every store the key is checked against, so two doors to one server are what two instances
// are to the key; tools/chaos TestGatewayRetriesASlowPOSTOnce runs the same rules in front of
// two instances of their own.
//
// The gateway is a real nginx with deploy/nginx/nginx.conf's rules where nginx is on PATH
// (gatewayNginx), else an in-process reverse proxy with the same retry rule (gatewayProxy);
// the row says which.

// gatewayReadTimeout is deploy/nginx/nginx.conf's proxy_read_timeout, which the in-process
// proxy uses too: the retry comes 5 s after the first copy. A shorter one would make the row
// quicker but no run faster (I11 goes beside rows that take far longer), and on a loaded
// machine it timed out on the retry as well: the client got the gateway's 504.
const gatewayReadTimeout = 5 * time.Second

// gatewayHoldAtMost bounds how long the first copy's answer is held back when the gateway's
// retry never comes.
const gatewayHoldAtMost = gatewayReadTimeout + 5*time.Second

// gatewayAttempt is one copy of the client's POST as an instance saw it.
type gatewayAttempt struct {
	// instance is 1 or 2: which upstream the gateway sent it to.
	instance int
	rec      copyRecord
	// held is true for the copy whose answer was held back past the gateway's timeout.
	held bool
}

// gatewayInstance is one upstream of the gateway: a reverse proxy to the drill's server that
// records every copy of the run's request and holds the first one's answer back.
type gatewayInstance struct {
	n   int
	srv *http.Server
	ln  net.Listener
}

// gatewayRun is what the two instances of one run share: which copy arrived first (its answer
// is the one held back), when that answer may go, and what each copy was answered.
type gatewayRun struct {
	t0 time.Time
	mu sync.Mutex
	// attempts are the copies, in the order they were answered by the server.
	attempts []gatewayAttempt
	// release is closed once a copy other than the held one has been answered: the gateway
	// has given up on the held one by then.
	release chan struct{}
	// inflight counts the copies the instances are handling.
	inflight sync.WaitGroup
	first    bool
}

// startInstance starts upstream n of run, passing requests to target.
func startInstance(n int, target string, run *gatewayRun) (*gatewayInstance, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ModifyResponse = func(resp *http.Response) error {
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if err != nil {
			return err
		}
		started, _ := resp.Request.Context().Value(startedKey{}).(time.Time)
		rec := copyRecord{Via: "http", Route: resp.Request.Method + " " + resp.Request.URL.Path,
			RequestID: resp.Request.Header.Get("X-Request-Id"), StartMS: ms(started.Sub(run.t0)),
			DurationMS: ms(time.Since(started)), Status: resp.StatusCode,
			Outcome:  resp.Header.Get("Idempotency-Outcome"),
			Replayed: strings.EqualFold(resp.Header.Get("Idempotent-Replayed"), "true")}
		var ref struct {
			OrderID flexID `json:"order_id"`
			Code    string `json:"code"`
		}
		if json.Unmarshal(body, &ref) == nil {
			rec.Ref, rec.Code = string(ref.OrderID), ref.Code
		}
		hold, _ := resp.Request.Context().Value(holdKey{}).(bool)
		run.mu.Lock()
		a := gatewayAttempt{instance: n, rec: rec, held: hold}
		if hold {
			a.rec.Path = fmt.Sprintf("instance %d: executed, its answer held past the gateway's timeout", n)
		} else {
			a.rec.Path = fmt.Sprintf("instance %d: the gateway's retry", n)
		}
		run.attempts = append(run.attempts, a)
		run.mu.Unlock()
		if !hold {
			closeOnce(run.release)
			return nil
		}
		select {
		case <-run.release:
		case <-time.After(gatewayHoldAtMost):
		}
		return nil
	}
	proxy.ErrorLog = discardLog
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		run.inflight.Add(1)
		defer run.inflight.Done()
		run.mu.Lock()
		hold := !run.first
		run.first = true
		run.mu.Unlock()
		ctx := context.WithValue(context.WithValue(r.Context(), startedKey{}, time.Now()), holdKey{}, hold)
		proxy.ServeHTTP(w, r.WithContext(ctx))
	})
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return &gatewayInstance{n: n, srv: srv, ln: ln}, nil
}

// discardLog keeps the instances' proxies quiet about the held copy's broken connection.
var discardLog = log.New(io.Discard, "", 0)

// startedKey carries when an instance received a copy; holdKey whether it is the run's first,
// whose answer is held.
type (
	startedKey struct{}
	holdKey    struct{}
)

// closeMu serialises closeOnce.
var closeMu sync.Mutex

// closeOnce closes ch unless it is closed already: a run's release is closed by the retry's
// instance and again by the run once the client has its answer.
func closeOnce(ch chan struct{}) {
	closeMu.Lock()
	defer closeMu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// addr is the instance's host:port.
func (g *gatewayInstance) addr() string { return g.ln.Addr().String() }

// stop closes the instance's listener and connections.
func (g *gatewayInstance) stop() { _ = g.srv.Close() }

// gateway is the proxy in front of the two instances: nginx, or the in-process fallback.
type gateway interface {
	// base is the gateway's URL.
	base() string
	// name says which gateway it is, for the row.
	name() string
	stop()
}

// startGateway starts nginx with deploy/nginx/nginx.conf's rules in front of upstreams when
// nginx is on PATH, and the in-process proxy otherwise (or when nginx will not start, which
// the name then says).
func startGateway(ctx context.Context, upstreams []string) (gateway, error) {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		return startProxyGateway(upstreams, "nginx is not on PATH")
	}
	g, err := startNginx(ctx, bin, upstreams)
	if err != nil {
		return startProxyGateway(upstreams, "nginx did not start: "+oneLine(err.Error()))
	}
	return g, nil
}

// nginxGateway is a private nginx: its own prefix directory, configuration and logs, stopped
// by its pid.
type nginxGateway struct {
	listen, prefix string
	cmd            *exec.Cmd
	done           chan struct{}
}

func (g *nginxGateway) base() string { return "http://" + g.listen }
func (g *nginxGateway) name() string {
	return "nginx with deploy/nginx/nginx.conf's rules"
}

func (g *nginxGateway) stop() {
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(5 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.done
	}
	_ = os.RemoveAll(g.prefix)
}

// nginxConf rewrites deploy/nginx/nginx.conf for a private nginx: its listen address, the two
// upstreams, log and temporary files under prefix. Every rule of the location — the retry, its
// timeouts, the request id — stays as the file has it.
func nginxConf(conf, prefix, listen string, upstreams []string, root bool) (string, error) {
	var servers strings.Builder
	for _, u := range upstreams {
		fmt.Fprintf(&servers, "        server %s max_fails=0;\n", u)
	}
	edits := []struct {
		re, with string
	}{
		{`(?m)^error_log .*;$`, "error_log " + filepath.Join(prefix, "error.log") + " warn;"},
		{`(?m)^(\s*)access_log .* oncepay;$`, "${1}access_log " + filepath.Join(prefix, "access.log") + " oncepay;"},
		{`(?m)^(\s*)listen \S+;$`, "${1}listen " + listen + ";"},
		{`(?m)(upstream oncepay \{\n(?:\s*#.*\n)*)(?:\s*server \S+ max_fails=0;\n)+`, "${1}" + strings.ReplaceAll(servers.String(), "$", "$$")},
		{`(?m)^http \{$`, "http {\n    client_body_temp_path " + prefix + "/client_body;\n    proxy_temp_path " + prefix + "/proxy;\n" +
			"    fastcgi_temp_path " + prefix + "/fastcgi;\n    uwsgi_temp_path " + prefix + "/uwsgi;\n    scgi_temp_path " + prefix + "/scgi;"},
	}
	for _, e := range edits {
		re := regexp.MustCompile(e.re)
		if !re.MatchString(conf) {
			return "", fmt.Errorf("deploy/nginx/nginx.conf has no line matching %s", e.re)
		}
		conf = re.ReplaceAllString(conf, e.with)
	}
	if !strings.Contains(conf, "proxy_next_upstream error timeout non_idempotent;") {
		return "", errors.New("deploy/nginx/nginx.conf does not retry POSTs (proxy_next_upstream error timeout non_idempotent)")
	}
	if root {
		// Workers would otherwise run as nobody and could not write the prefix's files.
		conf = "user root;\n" + conf
	}
	return conf, nil
}

// startNginx starts a private nginx on a free port of 127.0.0.1 and waits until it accepts
// connections.
func startNginx(ctx context.Context, bin string, upstreams []string) (*nginxGateway, error) {
	prefix, err := os.MkdirTemp("", "drill-i11-nginx-")
	if err != nil {
		return nil, err
	}
	for _, d := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		if err := os.MkdirAll(filepath.Join(prefix, d), 0o755); err != nil {
			return nil, err
		}
	}
	listen, err := freeAddr()
	if err != nil {
		return nil, err
	}
	conf, err := nginxConf(deploy.NginxConf, prefix, listen, upstreams, os.Geteuid() == 0)
	if err != nil {
		return nil, err
	}
	confPath := filepath.Join(prefix, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-p", prefix, "-c", confPath, "-g", "daemon off; pid "+filepath.Join(prefix, "nginx.pid")+";")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	g := &nginxGateway{listen: listen, prefix: prefix, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(g.done) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", listen, 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return g, nil
		}
		select {
		case <-g.done:
			log, _ := os.ReadFile(filepath.Join(prefix, "error.log"))
			_ = os.RemoveAll(prefix)
			return nil, fmt.Errorf("nginx exited: %s %s", strings.TrimSpace(stderr.String()), strings.TrimSpace(string(log)))
		case <-ctx.Done():
			g.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			g.stop()
			return nil, fmt.Errorf("nginx does not accept connections on %s after 5s", listen)
		}
	}
}

// freeAddr returns a free host:port of 127.0.0.1.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// proxyGateway is the fallback: deploy/nginx/nginx.conf's rule in Go. Each request goes to the
// next upstream in turn; after an error or no answer within gatewayReadTimeout it goes to the
// one after, POST included, at most twice.
type proxyGateway struct {
	srv    *http.Server
	ln     net.Listener
	why    string
	mu     sync.Mutex
	next   int
	ups    []string
	client *http.Client
}

func (g *proxyGateway) base() string { return "http://" + g.ln.Addr().String() }
func (g *proxyGateway) name() string {
	return "an in-process proxy with deploy/nginx/nginx.conf's retry rule (" + g.why + ")"
}
func (g *proxyGateway) stop() { _ = g.srv.Close() }

// gatewayTries is deploy/nginx/nginx.conf's proxy_next_upstream_tries.
const gatewayTries = 2

func startProxyGateway(upstreams []string, why string) (*proxyGateway, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g := &proxyGateway{ln: ln, why: why, ups: upstreams, client: &http.Client{Timeout: gatewayReadTimeout}}
	g.srv = &http.Server{Handler: http.HandlerFunc(g.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = g.srv.Serve(ln) }()
	return g, nil
}

func (g *proxyGateway) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	g.mu.Lock()
	first := g.next
	g.next = (g.next + 1) % len(g.ups)
	g.mu.Unlock()
	status := http.StatusBadGateway
	for try := range min(gatewayTries, len(g.ups)) {
		up := g.ups[(first+try)%len(g.ups)]
		req, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+up+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			break
		}
		req.Header = r.Header.Clone()
		resp, err := g.client.Do(req)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "Timeout") {
				status = http.StatusGatewayTimeout
			}
			continue
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
		_ = resp.Body.Close()
		return
	}
	w.WriteHeader(status)
}

// gatewaySeen is what I11's run saw: the copies the instances answered, the client's answer
// through the gateway, and the stock of the order's SKU since before.
type gatewaySeen struct {
	gateway  string
	attempts []gatewayAttempt
	client   copyRecord
	delta    stockDelta
	qty      int64
}

// checkGatewayRetry judges I11: the gateway must have sent the POST twice (else the drill did
// not replay the incident, an error), and the two copies must make one order between them —
// the stock taken once, one order_id — and the client must get that order.
func checkGatewayRetry(f *findings, s gatewaySeen) error {
	if len(s.attempts) < 2 {
		return fmt.Errorf("the gateway (%s) sent the POST %d time(s), not twice: I11 was not replayed", s.gateway, len(s.attempts))
	}
	var ids []string
	for _, a := range s.attempts {
		if a.rec.Status == http.StatusCreated && a.rec.Ref != "" && !containsString(ids, a.rec.Ref) {
			ids = append(ids, a.rec.Ref)
		}
	}
	if len(ids) > 1 {
		f.effectf("through %s, the retry on the next instance executed again: %d orders (%s) for one client request", s.gateway, len(ids), strings.Join(ids, ", "))
	}
	if want := (stockDelta{-s.qty, s.qty, 0}); s.delta != want {
		f.effectf("stock %s, want %s (%s orders' worth)", s.delta, want, times(s.delta.reserved, s.qty))
	}
	inUse := func(c copyRecord) bool { return c.Status == http.StatusConflict && c.Code == "idempotency_key_in_use" }
	switch {
	case inUse(s.client):
		// The retry came while the first copy still ran (a slow server): the contract's 409,
		// which the client retries later, and is then answered with the first's order.
	case s.client.Status != http.StatusCreated:
		f.answerf("the client's POST through the gateway answered %s, want 201 (or 409 idempotency_key_in_use while the first copy runs)", answerSummary(s.client))
	case len(ids) > 0 && s.client.Ref != ids[0]:
		f.answerf("the client was told of order %s, not the order the first instance executed (%s)", s.client.Ref, ids[0])
	}
	for _, a := range s.attempts[1:] {
		if inUse(a.rec) {
			continue
		}
		if a.rec.Status == http.StatusCreated && a.rec.Outcome != "" && a.rec.Outcome != "replayed" {
			f.answerf("the gateway's retry on instance %d answered Idempotency-Outcome %q, want replayed", a.instance, a.rec.Outcome)
		}
	}
	return nil
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// gatewayRetry is I11: one POST /v1/orders (the lab's: POST /lab/orders/submit, which keeps no
// key) through a gateway that retries it on the next instance after its read timeout.
func (d *drill) gatewayRetry(ctx context.Context, rt routes) (out outcome, err error) {
	const qty = 1
	sku, err := d.newSKU(ctx, rt, "I11", 1999, 100)
	if err != nil {
		return out, err
	}
	run := &gatewayRun{t0: time.Now(), release: make(chan struct{})}
	var ups []string
	for n := 1; n <= 2; n++ {
		inst, err := startInstance(n, d.cfg.URL, run)
		if err != nil {
			return out, err
		}
		defer inst.stop()
		ups = append(ups, inst.addr())
	}
	gw, err := startGateway(ctx, ups)
	if err != nil {
		return out, err
	}
	defer gw.stop()
	cl := call{method: http.MethodPost, path: rt.gatewayOrders, bearer: d.cfg.UserKey, body: orderBody(sku.SKU, qty),
		requestID: d.requestID(), base: gw.base(), fresh: true}
	if rt.target == oncepayRoutes.target {
		cl.idemKey = d.key(rt, "I11")
	}
	run.t0 = time.Now()
	client := d.c.fireHTTP(ctx, run.t0, "client, through the gateway", cl, nil)
	closeOnce(run.release)
	// Every copy the gateway sent had reached an instance before the client was answered; wait
	// for the server's answers to them (the held one's included) before reading the effect.
	handled := make(chan struct{})
	go func() { run.inflight.Wait(); close(handled) }()
	select {
	case <-handled:
	case <-ctx.Done():
		return out, ctx.Err()
	}
	after, err := d.stock(ctx, sku.SKU)
	if err != nil {
		return out, err
	}
	run.mu.Lock()
	seen := gatewaySeen{gateway: gw.name(), attempts: append([]gatewayAttempt(nil), run.attempts...), client: client,
		delta: after.since(sku), qty: qty}
	run.mu.Unlock()
	// The held copy was answered first by the server but reached the drill last: list it first.
	for i, a := range seen.attempts {
		if a.held && i > 0 {
			seen.attempts[0], seen.attempts[i] = seen.attempts[i], seen.attempts[0]
		}
	}
	out.copies = append(out.copies, client)
	for _, a := range seen.attempts {
		out.copies = append(out.copies, a.rec)
	}
	if err := checkGatewayRetry(&out.findings, seen); err != nil {
		return out, err
	}
	out.notef("gateway: %s; the two instances are two doors to this one server (see docs/drills.md)", gw.name())
	out.expected = fmt.Sprintf("one order for the client's POST, sent twice by the gateway; stock %s", stockDelta{-qty, qty, 0})
	out.observed = fmt.Sprintf("%d copies at the instances (%s); the client got %s; stock %s", len(seen.attempts),
		attemptsText(seen.attempts), answerSummary(client), seen.delta)
	out.held = fmt.Sprintf("through %s: the gateway sent the POST twice, it made one order (the retry answered %s)", gw.name(), attemptsText(seen.attempts[1:]))
	return out, nil
}

// attemptsText lists the instances' answers, e.g. "instance 1 201 executed, instance 2 201 replayed".
func attemptsText(attempts []gatewayAttempt) string {
	var parts []string
	for _, a := range attempts {
		parts = append(parts, fmt.Sprintf("instance %d %s", a.instance, answerSummary(a.rec)))
	}
	return strings.Join(parts, ", ")
}
