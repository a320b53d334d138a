// Package apptest starts oncepay instances for integration tests: the real router over real
// HTTP on 127.0.0.1, on the test's own database and Redis (testenv), and, when the test asks
// for them, an in-process Kafka, the embedded channel simulator and the background loops (the
// payment notifications consumer, the outbox relay, the scheduled jobs, webhook delivery).
// Tests drive an instance the way users, channels and drills do — HTTP requests, signed
// notifications, messages on payment.notifications — and check the business effect where it
// lives: in the database and on the order.events topic.
//
// A domain's tests start with StartOnly and name the parts they need, so that a test of
// recharges costs a database, a Redis and a router, not a Kafka consumer joining its group;
// Start, which runs every part, is for the tests of the whole service (internal/app).
//
// Every helper that talks to the server returns what it got instead of failing, so that it can
// be called from the goroutines of a storm; the helpers that take a testing.TB fail the test
// and must be called from the test's goroutine.
package apptest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent/httpkey"
	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/platform/web"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// The keys of the default configuration and the demo data (docs/contract.md).
const (
	// AdminKey is the bearer key of /v1/admin/*.
	AdminKey = "dev-admin-key"
	// AliceKey is the API key of the demo user alice.
	AliceKey = "demo-alice-key"
	// BobKey is the API key of the demo user bob.
	BobKey = "demo-bob-key"
)

// Server is one running instance and the connections a test needs to look behind it.
type Server struct {
	// App is the instance.
	App *app.App
	// Config is the configuration it was built with.
	Config config.Config
	// DB is its database, for checking business effects.
	DB *gorm.DB
	// Deps are the database, Redis and Kafka it runs on; a second instance built on the same
	// Deps stands for another replica.
	Deps app.Deps
	// URL is its base URL, http://127.0.0.1:port.
	URL string

	// parts are the parts it was started with: every part for Start and StartOn, none for At
	// (a process of the binary, whose Kafka the test does not hold).
	parts  Part
	client *http.Client
}

// Option changes the configuration before the instance is built.
type Option func(*config.Config)

// Config returns the configuration tests start from: the defaults of config.LoadFrom with no
// environment at all (dev keys, demo data seeded), with the embedded state in a temporary
// directory, then every option applied.
func Config(tb testing.TB, opts ...Option) config.Config {
	tb.Helper()
	cfg, err := config.LoadFrom(func(string) (string, bool) { return "", false })
	if err != nil {
		tb.Fatalf("default configuration: %v", err)
	}
	cfg.DataDir = tb.TempDir()
	cfg.SeedDemo = true
	// Each test gets its own channel simulator on a free port, quick to give up on a call
	// (a timeout is indefinite, I8) and quick to retry its notifications.
	cfg.EmbeddedChannelAddr = "127.0.0.1:0"
	cfg.ChannelTimeout = 500 * time.Millisecond
	cfg.ChannelRetries = 1
	cfg.ChannelSimSchedule = []time.Duration{time.Second, 2 * time.Second, 5 * time.Second}
	def := cfg.ChannelSecret
	for _, o := range opts {
		o(&cfg)
	}
	// An option that sets ONCEPAY_CHANNEL_SECRET sets it for every channel still on the
	// default, as LoadFrom would have (it fills Channels before any option runs).
	for i := range cfg.Channels {
		if cfg.Channels[i].Secret == def {
			cfg.Channels[i].Secret = cfg.ChannelSecret
		}
	}
	return cfg
}

// Part is a piece of an instance that StartOnly starts only when a test asks for it. Every
// instance has its database, its Redis and its HTTP router; parts are combined with |.
type Part uint

const (
	// Kafka is an in-process broker with the contract's topics (testenv.Kafka). Without it the
	// instance's Kafka is an address where nothing listens: /readyz answers 503, and Writer,
	// Messages, OrderEvents and WaitConsumed fail the test.
	Kafka Part = 1 << iota
	// Channel is the embedded channel simulator (App.Channel) that the instance calls to open,
	// query, close and refund trades. Without it the channel is an address where nothing
	// listens: every call to it fails to connect, an outcome unknown to oncepay
	// (channel.ErrIndefinite, I8).
	Channel
	// Loops runs the instance — App.Run: the payment notifications consumer, the outbox relay,
	// the scheduled jobs and webhook delivery — and waits until /readyz answers 200. Loops
	// brings Kafka, which the consumer and the relay need. Without it the router is served
	// alone, and a test drives a loop by hand when it needs one.
	Loops

	// Router is none of the parts: the database, Redis and the HTTP router, which is what a
	// domain's tests start by default (StartOnly(t, apptest.Router)).
	Router Part = 0
	// every is all the parts: what Start runs.
	every = Kafka | Channel | Loops
)

// Start builds an instance on fresh dependencies and runs every part of it — HTTP server,
// Kafka, the channel simulator, the consumer, the outbox relay and the jobs — on a free port of
// 127.0.0.1. It returns once /readyz answers 200, that is once the consumer has joined its
// group. The instance is stopped, and waited for, when the test ends. Start is for the tests
// of the whole service; a domain's tests use StartOnly.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	return StartOnly(tb, every, opts...)
}

// StartOnly builds an instance on fresh dependencies with the parts a test names and serves
// its router on a free port of 127.0.0.1: StartOnly(t, apptest.Router) for the database, Redis
// and the router, StartOnly(t, apptest.Kafka|apptest.Loops) for an instance that also consumes
// and publishes. Leaving Loops out saves the consumer's group join at the start and the
// drain at the end — a few tenths of a second a test, about as much as the rest of the start —
// and keeps jobs the test did not ask for from changing what it checks.
func StartOnly(tb testing.TB, parts Part, opts ...Option) *Server {
	tb.Helper()
	if parts&Loops != 0 {
		parts |= Kafka
	}
	deps := app.Deps{DB: testenv.DB(tb), Redis: testenv.Redis(tb)}
	if parts&Kafka != 0 {
		deps.Kafka = testenv.Kafka(tb)
	} else {
		deps.Kafka = testenv.NoKafka(tb)
	}
	if parts&Channel == 0 {
		// First, so that an option of the test can still name a channel of its own.
		opts = append([]Option{noChannel(tb)}, opts...)
	}
	if parts&Loops != 0 {
		return run(tb, deps, parts, opts)
	}
	return serve(tb, deps, parts, opts)
}

// NewDeps returns fresh dependencies for one test: a migrated database, an isolated Redis and
// an in-process Kafka broker, all closed when the test ends.
func NewDeps(tb testing.TB) app.Deps {
	tb.Helper()
	return app.Deps{DB: testenv.DB(tb), Redis: testenv.Redis(tb), Kafka: testenv.Kafka(tb)}
}

// StartOn is Start on given dependencies: two instances started on the same Deps stand for
// two replicas of the service (each needs its own NodeID).
func StartOn(tb testing.TB, deps app.Deps, opts ...Option) *Server {
	tb.Helper()
	return run(tb, deps, every, opts)
}

// StartHTTPOnly is StartOnly(tb, Kafka|Channel): the whole instance built, its router served,
// none of its background loops running. The tests of the whole service use it to drive those
// loops by hand.
func StartHTTPOnly(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	return StartOnly(tb, Kafka|Channel, opts...)
}

// run builds an instance on deps and runs it (App.Run) until the test ends.
func run(tb testing.TB, deps app.Deps, parts Part, opts []Option) *Server {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	s := build(tb, deps, parts, append([]Option{publicURL(ln)}, opts...))
	ctx, cancel := context.WithCancel(context.Background())
	var runErr error
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		runErr = s.App.Run(ctx, ln)
	}()
	tb.Cleanup(func() {
		cancel()
		select {
		case <-stopped:
			if runErr != nil {
				tb.Errorf("app.Run returned %v", runErr)
			}
		case <-time.After(30 * time.Second):
			tb.Errorf("the instance did not stop within 30s of its context ending")
		}
	})
	s.URL = "http://" + ln.Addr().String()
	s.waitReady(tb, stopped, &runErr)
	return s
}

// serve builds an instance on deps and serves its router alone until the test ends.
func serve(tb testing.TB, deps app.Deps, parts Part, opts []Option) *Server {
	tb.Helper()
	srv := httptest.NewUnstartedServer(nil)
	s := build(tb, deps, parts, append([]Option{publicURL(srv.Listener)}, opts...))
	srv.Config.Handler = s.App.Handler()
	srv.Start()
	tb.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// noChannel points the instance at a channel where nothing listens instead of starting the
// embedded simulator.
func noChannel(tb testing.TB) Option {
	url := "http://" + testenv.Nowhere(tb)
	return func(c *config.Config) { c.ChannelURL = url }
}

// needKafka fails the test unless the instance has Kafka, which the helper what reads or
// writes: without it the helper would wait out its timeout on an address where nothing
// listens.
func (s *Server) needKafka(tb testing.TB, what string) {
	tb.Helper()
	if s.parts&Kafka == 0 {
		tb.Fatalf("%s needs Kafka: start the instance with apptest.StartOnly(t, apptest.Kafka|…)", what)
	}
}

// publicURL makes the channel's notifications come back to the instance served on ln.
func publicURL(ln net.Listener) Option {
	return func(c *config.Config) { c.PublicURL = "http://" + ln.Addr().String() }
}

func build(tb testing.TB, deps app.Deps, parts Part, opts []Option) *Server {
	tb.Helper()
	quietLogs()
	cfg := Config(tb, opts...)
	a, err := app.New(context.Background(), cfg, deps)
	if err != nil {
		tb.Fatalf("app.New: %v", err)
	}
	tb.Cleanup(a.Close)
	return &Server{App: a, Config: cfg, DB: deps.DB, Deps: deps, parts: parts, client: newClient(tb)}
}

// newClient returns the HTTP client of one Server, its idle connections closed when the test
// ends.
func newClient(tb testing.TB) *http.Client {
	transport := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second}
	tb.Cleanup(transport.CloseIdleConnections)
	return &http.Client{Transport: transport, Timeout: 60 * time.Second}
}

var quietOnce sync.Once

// quietLogs keeps the instances' logs to warnings and errors: the info lines (one per request)
// would bury a failure's own output under thousands of lines. Any ONCEPAY_TEST_LOG keeps them,
// as in the idempotent package's tests.
func quietLogs() {
	quietOnce.Do(func() {
		level := slog.LevelWarn
		if os.Getenv("ONCEPAY_TEST_LOG") != "" {
			level = slog.LevelInfo
		}
		slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
	})
}

// waitReady polls /readyz until it answers 200, failing after 30s or when Run returns (stopped
// closed, with its error in *runErr).
func (s *Server) waitReady(tb testing.TB, stopped <-chan struct{}, runErr *error) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last Response
	for time.Now().Before(deadline) {
		select {
		case <-stopped:
			tb.Fatalf("app.Run returned before the instance was ready: %v", *runErr)
		default:
		}
		if last = s.Do(http.MethodGet, "/readyz", "", nil, nil); last.Status == http.StatusOK {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.Fatalf("/readyz did not answer 200 within 30s; last answer: %s", last)
}

// Response is what the server answered. Status is 0 and Err is set when no answer came.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	Err    error
}

// String renders the response for failure messages.
func (r Response) String() string {
	if r.Err != nil {
		return "no response: " + r.Err.Error()
	}
	return fmt.Sprintf("%d %s", r.Status, bytes.TrimSpace(r.Body))
}

// Problem decodes the body as an RFC 9457 problem; its Code is "" when it is not one.
func (r Response) Problem() web.Problem {
	var p web.Problem
	_ = json.Unmarshal(r.Body, &p)
	return p
}

// Code is the problem code of the answer, or "" for a success.
func (r Response) Code() string { return r.Problem().Code }

// Outcome is the Idempotency-Outcome header: what the idempotency layer did with the request
// (executed, replayed, rejected, state_rejected…), or "" when it did not see it.
func (r Response) Outcome() string { return r.Header.Get(httpkey.HeaderOutcome) }

// Decode unmarshals the body into v, failing the test when it cannot.
func (r Response) Decode(tb testing.TB, v any) {
	tb.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		tb.Fatalf("decode %s: %v", r, err)
	}
}

// Do sends one request to the server: apiKey becomes "Authorization: Bearer apiKey" unless it
// is empty; body is sent as it is when it is a string or []byte, as JSON otherwise, and not at
// all when nil; headers are added last. It never fails the test, so storms can call it.
func (s *Server) Do(method, path, apiKey string, body any, headers map[string]string) Response {
	return s.DoContext(context.Background(), method, path, apiKey, body, headers)
}

// DoContext is Do under ctx: a client that gives up when ctx ends.
func (s *Server) DoContext(ctx context.Context, method, path, apiKey string, body any, headers map[string]string) Response {
	raw, err := encode(body)
	if err != nil {
		return Response{Err: err}
	}
	var r io.Reader
	if raw != nil {
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, r)
	if err != nil {
		return Response{Err: err}
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	if raw != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	res, err := s.client.Do(req)
	if err != nil {
		return Response{Err: err}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return Response{Status: res.StatusCode, Header: res.Header, Body: b, Err: err}
}

func encode(body any) ([]byte, error) {
	switch b := body.(type) {
	case nil:
		return nil, nil
	case string:
		return []byte(b), nil
	case []byte:
		return b, nil
	default:
		return json.Marshal(b)
	}
}

// Must fails the test unless r has status want, and returns it for chaining.
func Must(tb testing.TB, r Response, want int) Response {
	tb.Helper()
	if r.Status != want {
		tb.Fatalf("got %s, want status %d", r, want)
	}
	return r
}

// WantProblem fails the test unless r is a problem+json answer with status and code.
func WantProblem(tb testing.TB, r Response, status int, code string) {
	tb.Helper()
	if r.Status != status {
		tb.Fatalf("got %s, want %d %s", r, status, code)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		tb.Errorf("Content-Type %q, want application/problem+json; body %s", ct, r)
	}
	if p := r.Problem(); p.Code != code || p.Status != status {
		tb.Errorf("problem code %q status %d, want %q %d; body %s", p.Code, p.Status, code, status, r)
	}
}

// Eventually polls cond every 20ms until it holds, failing the test after timeout with what
// the last call to cond said.
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %s; last state: %s", what, timeout, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Parallel runs fn(0..n-1) on workers goroutines and waits for them: a storm with a bounded
// number of requests in flight.
func Parallel(workers, n int, fn func(i int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				fn(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// sleepBrief is the pause between two polls or retries.
func sleepBrief() { time.Sleep(20 * time.Millisecond) }

// SkewClock runs the process's wall clock (internal/platform/clock) d off the machine's — and
// the database's — until the test ends, as ONCEPAY_CHAOS_CLOCK_OFFSET does. The clock is the
// process's: a test that skews it must not run in parallel with others.
func SkewClock(t testing.TB, d time.Duration) {
	t.Helper()
	prev := clock.SetOffset(d)
	t.Cleanup(func() { clock.SetOffset(prev) })
}
