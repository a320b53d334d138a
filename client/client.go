// Package client is a Go client for oncepay's HTTP API (docs/contract.md) that keeps the
// client's half of exactly-once: a write is named by one Idempotency-Key before its first
// attempt leaves, and every retry sends that same key with byte-identical bytes until a final
// answer comes (I18, "a client that retries with a new key": the client timed out, generated a
// fresh key and sent again — two orders).
//
// The rules a caller can rely on:
//
//   - Every write gets its key from WithKey, else from Config.NewKey, else 128 random bits. The
//     key is handed to Config.BeforeSend before anything is sent, so that a caller can persist
//     it where a crash would lose it, and resume after a crash with WithKey.
//   - A network error, an attempt that timed out, a 5xx, 408, 429 and 409
//     idempotency_key_in_use are retried with the same key, body and X-Request-Id, after an
//     exponential backoff with jitter (github.com/sethvargo/go-retry) or the answer's
//     Retry-After when it asks for longer, until Config.Deadline. Any other 4xx is final.
//   - A final answer that oncepay replayed from the key's stored outcome says so in Meta
//     (Replayed, Outcome): the write did not run again.
//   - A refusal is a *Problem (RFC 9457, with the contract's code). A call that ran out of
//     retries or time without a final answer is an *IndefiniteError: the write may or may not
//     have happened, and only the same key, sent again later, finds out.
//
// The package imports nothing of oncepay's service or training kit: it speaks the public
// contract over HTTP, like any merchant's program.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sethvargo/go-retry"
)

// The headers of oncepay's idempotency protocol (docs/contract.md, Idempotency keys).
const (
	// HeaderKey names one write of one user: every attempt of the write carries it.
	HeaderKey = "Idempotency-Key"
	// HeaderReplayed is "true" on an answer sent again from the key's stored outcome.
	HeaderReplayed = "Idempotent-Replayed"
	// HeaderOutcome says what the idempotency layer did with the attempt.
	HeaderOutcome = "Idempotency-Outcome"
	// HeaderRequestID is sent on every attempt of one call with the same value, so that the
	// key's attempt log shows a retry as one request id seconds apart.
	HeaderRequestID = "X-Request-Id"
)

// The defaults of Config's zero fields.
const (
	DefaultAttemptTimeout = 10 * time.Second
	DefaultDeadline       = 60 * time.Second
	DefaultInitialBackoff = 100 * time.Millisecond
	DefaultMaxBackoff     = 5 * time.Second
	DefaultJitterPercent  = 20
)

// maxBody is the most of an answer the client reads; oncepay's answers are small.
const maxBody = 1 << 20

// Config configures a Client. Only BaseURL is required.
type Config struct {
	// BaseURL is oncepay's base URL, such as http://127.0.0.1:8080.
	BaseURL string
	// APIKey is sent as "Authorization: Bearer <APIKey>": a user's API key, or the admin key
	// for the admin routes. Empty sends no Authorization header.
	APIKey string
	// HTTPClient sends every attempt. Nil means a client over Transport. Its own Timeout, if
	// any, bounds each attempt as AttemptTimeout does.
	HTTPClient *http.Client
	// Transport is the RoundTripper of the default HTTPClient (nil: http.DefaultTransport). A
	// test or a chaos run puts its fault-injecting transport here.
	Transport http.RoundTripper
	// AttemptTimeout bounds one attempt, from sending the request to reading the answer
	// (default 10 s). An attempt that timed out is retried with the same key: the server may
	// have done the work and only its answer was lost.
	AttemptTimeout time.Duration
	// Deadline bounds a whole call, every attempt and pause included (default 60 s); a
	// deadline of the caller's context counts too, whichever comes first.
	Deadline time.Duration
	// InitialBackoff is the pause before the first retry (default 100 ms); each later pause
	// doubles, up to MaxBackoff (default 5 s).
	InitialBackoff time.Duration
	// MaxBackoff caps the pauses between attempts.
	MaxBackoff time.Duration
	// JitterPercent spreads every pause by ± that percentage (default 20, at most 100), so that
	// the clients one fault met do not all come back at the same moment.
	JitterPercent uint64
	// MaxAttempts caps the attempts of one call; 0 leaves it to Deadline.
	MaxAttempts int
	// NewKey makes the Idempotency-Key of a write that was not given one with WithKey. Nil
	// means 128 random bits (crypto/rand.Text). A key is 1..255 visible ASCII characters and
	// must not start with "tok_", which oncepay reserves for its one-time tokens.
	NewKey func() (string, error)
	// BeforeSend is called once per write, after its key is chosen and before its first
	// attempt is sent. Persist the key here when a crash must not lose it (I18): a program that
	// restarts resumes the write with WithKey and the same body. An error aborts the call with
	// nothing sent.
	BeforeSend func(ctx context.Context, w Write) error
	// OnAttempt, when set, is called after every attempt with what it got, from the calling
	// goroutine: for logs and metrics.
	OnAttempt func(Attempt)
	// UserAgent is the User-Agent header (default "oncepay-go-client").
	UserAgent string
}

// Write is a write the client is about to send, as BeforeSend sees it.
type Write struct {
	// Key is the Idempotency-Key every attempt carries.
	Key string
	// Method and Path are the route, such as POST /v1/orders.
	Method, Path string
	// Body is the exact bytes every attempt sends; nil for a write without a body.
	Body []byte
	// RequestID is the X-Request-Id every attempt carries.
	RequestID string
}

// Attempt is one attempt of a call and what became of it, as OnAttempt sees it.
type Attempt struct {
	// Key is the call's Idempotency-Key; empty for a read.
	Key          string
	Method, Path string
	// RequestID is the X-Request-Id the attempt carried, the same on every attempt of a call.
	RequestID string
	// N counts the call's attempts from 1.
	N int
	// Status is the answer's HTTP status; 0 when no answer came (Err says why).
	Status int
	// Outcome and Replayed are the answer's Idempotency-Outcome and Idempotent-Replayed.
	Outcome  Outcome
	Replayed bool
	// Code is the problem code of an error answer.
	Code string
	// Body is the answer's body (at most 1 MiB); nil when no answer came.
	Body []byte
	// Err is why no answer came: a network error or a timeout.
	Err error
	// Duration is how long the attempt took.
	Duration time.Duration
	// Retry says the client will try again; false means this attempt ended the call.
	Retry bool
}

// Outcome is the Idempotency-Outcome header: what the idempotency layer did with an attempt.
type Outcome string

// The outcomes of docs/contract.md.
const (
	OutcomeExecuted      Outcome = "executed"
	OutcomeReplayed      Outcome = "replayed"
	OutcomeInProgress    Outcome = "in_progress"
	OutcomeMismatch      Outcome = "mismatch"
	OutcomeTokenInvalid  Outcome = "token_invalid"
	OutcomeStateRejected Outcome = "state_rejected"
	OutcomeRejected      Outcome = "rejected"
	OutcomeUnavailable   Outcome = "unavailable"
	OutcomeFailed        Outcome = "failed"
)

// Meta is what a call's final answer said about its idempotency, and how the client got it.
type Meta struct {
	// Key is the Idempotency-Key the write was sent with; empty for a read.
	Key string
	// Status is the final answer's HTTP status.
	Status int
	// Outcome is its Idempotency-Outcome; empty on routes without idempotency.
	Outcome Outcome
	// Replayed is true when the answer was the key's stored outcome sent again
	// (Idempotent-Replayed: true): the write had already happened, and did not run again.
	Replayed bool
	// Attempts is how many attempts the call took.
	Attempts int
	// RequestID is the X-Request-Id of the answer.
	RequestID string
}

// Response is the final 2xx answer of a call made with Do.
type Response struct {
	Meta
	// Header is the answer's header.
	Header http.Header
	// Body is the answer's body, at most 1 MiB.
	Body []byte
}

// Request is one call of Do.
type Request struct {
	// Method and Path name the route, such as POST /v1/orders; Path may carry a query.
	Method, Path string
	// Body is sent as JSON: nil sends no body, a []byte or json.RawMessage is sent as it is,
	// anything else is marshalled once, so that every attempt sends the same bytes.
	Body any
	// Keyed makes the call a write with an Idempotency-Key: the key is chosen and handed to
	// BeforeSend before the first attempt. The contract's client-facing writes need one.
	Keyed bool
}

// CallOption changes one call.
type CallOption func(*callOptions)

type callOptions struct {
	key, requestID string
}

// WithKey sends the write with key instead of a new one: the key persisted before a crash,
// or a one-time token from Client.Token (I7).
func WithKey(key string) CallOption { return func(o *callOptions) { o.key = key } }

// WithRequestID sends id as the X-Request-Id of every attempt instead of a generated one.
func WithRequestID(id string) CallOption { return func(o *callOptions) { o.requestID = id } }

// Client calls oncepay. It is safe for concurrent use.
type Client struct {
	cfg  Config
	base string
	http *http.Client
}

// New returns a Client for cfg, with the defaults filled in.
func New(cfg Config) (*Client, error) {
	base := strings.TrimRight(cfg.BaseURL, "/")
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		return nil, fmt.Errorf("client: BaseURL %q must be an http or https URL", cfg.BaseURL)
	}
	if cfg.AttemptTimeout <= 0 {
		cfg.AttemptTimeout = DefaultAttemptTimeout
	}
	if cfg.Deadline <= 0 {
		cfg.Deadline = DefaultDeadline
	}
	if cfg.InitialBackoff <= 0 {
		cfg.InitialBackoff = DefaultInitialBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.MaxBackoff < cfg.InitialBackoff {
		cfg.MaxBackoff = cfg.InitialBackoff
	}
	if cfg.JitterPercent == 0 {
		cfg.JitterPercent = DefaultJitterPercent
	}
	cfg.JitterPercent = min(cfg.JitterPercent, 100)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "oncepay-go-client"
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Transport: cfg.Transport}
	}
	return &Client{cfg: cfg, base: base, http: hc}, nil
}

// Do sends r, retrying as the package documentation says, and returns its 2xx answer. A
// final error answer is a *Problem; a call that ended without a final answer is an
// *IndefiniteError. The typed methods (CreateOrder and the others) are built on it; Do is for
// routes they do not cover.
func (c *Client) Do(ctx context.Context, r Request, opts ...CallOption) (*Response, error) {
	var o callOptions
	for _, opt := range opts {
		opt(&o)
	}
	w, err := c.prepare(ctx, r, o)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Deadline)
	defer cancel()
	var (
		n    int
		last error         // why the last retryable attempt did not settle the call
		hint time.Duration // the last answer's Retry-After
	)
	resp, err := retry.DoValue(ctx, c.backoff(ctx, &hint), func(ctx context.Context) (*Response, error) {
		n++
		resp, err := c.attempt(ctx, w, n, &hint)
		if err == nil {
			return resp, nil
		}
		if isRetryable(err) && ctx.Err() == nil && (c.cfg.MaxAttempts == 0 || n < c.cfg.MaxAttempts) {
			last = err
			return nil, retry.RetryableError(err)
		}
		last = err
		return nil, err
	})
	switch {
	case err == nil:
		return resp, nil
	case n == 0: // the caller's context ended before anything was sent
		return nil, err
	}
	var (
		p  *Problem
		re *requestError
	)
	if errors.As(err, &p) && !p.retryable() || errors.As(err, &re) {
		return nil, err // a final answer, or a request that was never sent
	}
	ie := &IndefiniteError{Key: w.Key, Method: w.Method, Path: w.Path, Attempts: n, Last: last}
	if ctxErr := context.Cause(ctx); ctxErr != nil && !errors.Is(last, ctxErr) {
		ie.Cause = ctxErr
	}
	return nil, ie
}

// prepare encodes r's body once and, for a write, chooses its key and hands it to BeforeSend.
func (c *Client) prepare(ctx context.Context, r Request, o callOptions) (Write, error) {
	body, err := encodeBody(r.Body)
	if err != nil {
		return Write{}, fmt.Errorf("client: %s %s: encoding the body: %w", r.Method, r.Path, err)
	}
	w := Write{Method: r.Method, Path: r.Path, Body: body, RequestID: o.requestID}
	if w.RequestID == "" {
		w.RequestID = "req_" + rand.Text()
	}
	if !r.Keyed {
		return w, nil
	}
	w.Key = o.key
	if w.Key == "" {
		if w.Key, err = c.newKey(); err != nil {
			return Write{}, fmt.Errorf("client: making an Idempotency-Key: %w", err)
		}
	}
	if err := validKey(w.Key, o.key != ""); err != nil {
		return Write{}, err
	}
	if c.cfg.BeforeSend != nil {
		if err := c.cfg.BeforeSend(ctx, w); err != nil {
			return Write{}, fmt.Errorf("client: BeforeSend refused key %s, nothing was sent: %w", w.Key, err)
		}
	}
	return w, nil
}

func (c *Client) newKey() (string, error) {
	if c.cfg.NewKey != nil {
		return c.cfg.NewKey()
	}
	return rand.Text(), nil
}

// validKey checks the contract's key format before anything is sent; a token (tok_) is
// accepted only when the caller passed it with WithKey.
func validKey(key string, given bool) error {
	if key == "" || len(key) > 255 {
		return fmt.Errorf("client: Idempotency-Key must be 1..255 characters, got %d", len(key))
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7e {
			return fmt.Errorf("client: Idempotency-Key %q holds a character that is not visible ASCII", key)
		}
	}
	if strings.HasPrefix(key, "tok_") && !given {
		return fmt.Errorf("client: Config.NewKey made %q; keys starting with tok_ are oncepay's one-time tokens", key)
	}
	return nil
}

func encodeBody(body any) ([]byte, error) {
	switch b := body.(type) {
	case nil:
		return nil, nil
	case []byte:
		return b, nil
	case json.RawMessage:
		return b, nil
	}
	return json.Marshal(body)
}

// backoff is the pause before each retry: exponential from InitialBackoff, capped at
// MaxBackoff, with jitter — or the answer's Retry-After (*hint) when it asks for longer. It
// stops when the pause would end past the call's deadline, so that the client gives up at
// once instead of sleeping into it.
func (c *Client) backoff(ctx context.Context, hint *time.Duration) retry.Backoff {
	b := retry.WithJitterPercent(c.cfg.JitterPercent,
		retry.WithCappedDuration(c.cfg.MaxBackoff, retry.NewExponential(c.cfg.InitialBackoff)))
	deadline, _ := ctx.Deadline()
	return retry.BackoffFunc(func() (time.Duration, bool) {
		d, stop := b.Next()
		if stop {
			return 0, true
		}
		d = max(d, *hint)
		*hint = 0
		if time.Until(deadline) <= d {
			return 0, true
		}
		return d, false
	})
}

// attempt sends w once and reads its answer. It returns the answer for a 2xx, a *Problem for
// an error answer, and the transport's error when no answer came; *hint is set to the
// answer's Retry-After.
func (c *Client) attempt(ctx context.Context, w Write, n int, hint *time.Duration) (*Response, error) {
	start := time.Now()
	resp, err := c.send(ctx, w)
	a := Attempt{Key: w.Key, Method: w.Method, Path: w.Path, RequestID: w.RequestID, N: n, Err: err}
	if resp != nil {
		resp.Attempts = n
		a.Status, a.Outcome, a.Replayed, a.Body = resp.Status, resp.Outcome, resp.Replayed, resp.Body
		*hint = retryAfter(resp.Header.Get("Retry-After"), time.Now())
		if resp.Status >= 300 {
			p := problemOf(resp)
			a.Code, err = p.Code, p
		}
	}
	a.Duration = time.Since(start)
	if c.cfg.OnAttempt != nil {
		a.Retry = err != nil && isRetryable(err) && ctx.Err() == nil && (c.cfg.MaxAttempts == 0 || n < c.cfg.MaxAttempts)
		c.cfg.OnAttempt(a)
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// send makes one HTTP exchange, bounded by AttemptTimeout. An error means no answer came.
func (c *Client) send(ctx context.Context, w Write) (*Response, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.AttemptTimeout)
	defer cancel()
	var body io.Reader
	if w.Body != nil {
		body = bytes.NewReader(w.Body)
	}
	req, err := http.NewRequestWithContext(ctx, w.Method, c.base+w.Path, body)
	if err != nil {
		return nil, &requestError{err}
	}
	if w.Body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	req.Header.Set(HeaderRequestID, w.RequestID)
	if c.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
	}
	if w.Key != "" {
		req.Header.Set(HeaderKey, w.Key)
	}
	hr, err := c.http.Do(req)
	if err != nil {
		return nil, err // a *url.Error: it names the method and URL
	}
	defer hr.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(hr.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer: %w", w.Method, w.Path, err)
	}
	return &Response{
		Meta: Meta{
			Key:       w.Key,
			Status:    hr.StatusCode,
			Outcome:   Outcome(hr.Header.Get(HeaderOutcome)),
			Replayed:  strings.EqualFold(hr.Header.Get(HeaderReplayed), "true"),
			RequestID: hr.Header.Get(HeaderRequestID),
		},
		Header: hr.Header,
		Body:   raw,
	}, nil
}

// requestError is a request the client could not even build: retrying cannot help.
type requestError struct{ err error }

func (e *requestError) Error() string { return "client: building the request: " + e.err.Error() }
func (e *requestError) Unwrap() error { return e.err }

// isRetryable reports whether an attempt's error leaves the call unsettled: no answer at all
// (the server may have done the work), or a Problem the contract says to retry.
func isRetryable(err error) bool {
	var p *Problem
	if errors.As(err, &p) {
		return p.retryable()
	}
	var re *requestError
	return !errors.As(err, &re)
}

// retryAfter parses a Retry-After header — seconds or an HTTP date — into a pause; 0 when it
// is absent or malformed.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
		return time.Duration(max(s, 0)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}
