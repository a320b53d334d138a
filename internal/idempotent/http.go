package idempotent

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// HTTP headers of the idempotency protocol.
const (
	HeaderKey      = "Idempotency-Key"
	HeaderOutcome  = "Idempotency-Outcome"
	HeaderReplayed = "Idempotent-Replayed"
)

// KeyFunc names the write a request asks for, from the request and its raw body.
type KeyFunc func(r *http.Request, body []byte) (Key, error)

// HeaderKeyFunc is the KeyFunc of client-facing create endpoints: the Idempotency-Key header,
// scoped to the caller returned by scope, so that two users' keys never collide.
func HeaderKeyFunc(bizType string, scope func(*http.Request) (string, bool)) KeyFunc {
	return func(r *http.Request, _ []byte) (Key, error) {
		values, present := r.Header[http.CanonicalHeaderKey(HeaderKey)]
		if !present {
			return Key{}, ErrKeyMissing
		}
		k := strings.TrimSpace(values[0])
		if len(values) != 1 || !ValidKey(k) {
			return Key{}, ErrKeyInvalid
		}
		who, ok := scope(r)
		if !ok {
			return Key{}, ErrKeyMissing.Withf("no caller to scope the key to")
		}
		return Key{Scope: who, BizType: bizType, BizKey: k}, nil
	}
}

// Middleware makes the wrapped handler exactly-once per key (every row of the contract's
// Idempotency-Key table). The handler runs inside the dedup transaction: its use case must
// reach the database through database.Conn or database.Transaction with the request's
// context. Every response carries Idempotency-Outcome; replays carry Idempotent-Replayed: true
// and the first response's status, allow-listed headers and body.
func (g *Guard) Middleware(keyFn KeyFunc) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := web.ReadBody(r)
			if err != nil {
				w.Header().Set(HeaderOutcome, string(Rejected))
				web.WriteError(w, r, err)
				return
			}
			key, err := keyFn(r, body)
			if err != nil {
				w.Header().Set(HeaderOutcome, string(Rejected))
				web.WriteError(w, r, err)
				return
			}
			// The path, not the route pattern: the same key on /orders/1/cancel and
			// /orders/2/cancel is two requests (422), never a replay of the other order's.
			req := Request{Key: key, Fingerprint: Fingerprint(r.Method, r.URL.Path, body)}

			var live http.Header
			res, err := g.Do(r.Context(), req, func(ctx context.Context) (Response, error) {
				rec := &recorder{header: http.Header{}, status: http.StatusOK}
				// Each attempt reads the whole body: Do runs the work again after an abort.
				attempt := r.WithContext(ctx)
				attempt.Body = io.NopCloser(bytes.NewReader(body))
				next.ServeHTTP(rec, attempt)
				live = rec.header
				if database.IsRetryable(rec.err) {
					return Response{}, rec.err // aborted by the database: Do runs it again
				}
				return rec.response(), nil
			})
			writeResult(w, r, res, err, live)
		})
	}
}

// writeResult sends the answer of Do. A live execution sends every header the handler set; a
// replay sends the stored ones.
func writeResult(w http.ResponseWriter, r *http.Request, res Result, err error, live http.Header) {
	h := w.Header()
	if err != nil {
		outcome := res.Outcome
		if outcome == "" {
			outcome = Failed
		}
		h.Set(HeaderOutcome, string(outcome))
		if outcome == InProgress {
			h.Set("Retry-After", "1")
		}
		web.WriteError(w, r, err)
		return
	}
	if res.Outcome == Executed && live != nil {
		for k, v := range live {
			h[k] = v
		}
	} else {
		for k, v := range res.Response.Header {
			h.Set(k, v)
		}
	}
	switch {
	case res.Outcome == Replayed:
		h.Set(HeaderReplayed, "true")
		h.Set(HeaderOutcome, string(Replayed))
	case h.Get(HeaderOutcome) == "":
		h.Set(HeaderOutcome, string(res.Outcome))
	}
	w.WriteHeader(res.Response.Status)
	_, _ = w.Write(res.Response.Body)
}

// recorder captures a handler's response so that it can be stored before it is sent.
type recorder struct {
	header      http.Header
	status      int
	wroteHeader bool
	body        bytes.Buffer
	err         error // the error behind a problem response, if the handler wrote one
}

// RecordError implements web.ErrorRecorder.
func (rec *recorder) RecordError(err error) { rec.err = err }

func (rec *recorder) Header() http.Header { return rec.header }

func (rec *recorder) WriteHeader(status int) {
	if !rec.wroteHeader {
		rec.status, rec.wroteHeader = status, true
	}
}

func (rec *recorder) Write(b []byte) (int, error) {
	rec.wroteHeader = true
	return rec.body.Write(b)
}

func (rec *recorder) response() Response {
	resp := Response{Status: rec.status, Body: bytes.Clone(rec.body.Bytes())}
	for _, name := range ReplayedHeaders {
		if v := rec.header.Get(name); v != "" {
			if resp.Header == nil {
				resp.Header = map[string]string{}
			}
			resp.Header[name] = v
		}
	}
	return resp
}

// TokenHandler serves POST /v1/idempotency-tokens: a one-time token bound to the caller (I7),
// to be sent back as the Idempotency-Key of the form it was issued for.
func (g *Guard) TokenHandler(scope func(*http.Request) (string, bool)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		who, ok := scope(r)
		if !ok {
			web.WriteError(w, r, ErrKeyMissing.Withf("no caller to bind the token to"))
			return
		}
		token, expires, err := g.IssueToken(r.Context(), who)
		if err != nil {
			web.WriteError(w, r, g.redisFailedHard(err))
			return
		}
		web.WriteJSON(w, http.StatusCreated, map[string]string{
			"token":      token,
			"expires_at": expires.Format(time.RFC3339),
		})
	}
}
