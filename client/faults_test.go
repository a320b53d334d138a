package client_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/oncepay/oncepay/client"
)

// sent is one request a test transport saw leave.
type sent struct {
	at        time.Time
	key       string
	requestID string
	method    string
	path      string
	body      []byte
}

// recorder keeps every request a transport sends, in order.
type recorder struct {
	mu   sync.Mutex
	reqs []sent
}

func (r *recorder) add(req *http.Request) (*http.Request, sent) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		_ = req.Body.Close()
	}
	s := sent{at: time.Now(), key: req.Header.Get(client.HeaderKey), requestID: req.Header.Get(client.HeaderRequestID),
		method: req.Method, path: req.URL.Path, body: body}
	r.mu.Lock()
	r.reqs = append(r.reqs, s)
	r.mu.Unlock()
	out := req.Clone(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(body))
	return out, s
}

func (r *recorder) all() []sent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sent(nil), r.reqs...)
}

// timeoutError is what a client sees when its answer never came: a net.Error that timed out.
type timeoutError struct{}

func (timeoutError) Error() string   { return "the answer was lost: i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// loseAnswers sends every request to the server and reads its whole answer, then, for the
// first lose requests, throws the answer away and reports a timeout: the server did the work
// and the client never heard of it — I18's lost answer.
type loseAnswers struct {
	recorder
	next http.RoundTripper
	mu   sync.Mutex
	lose int
}

func (t *loseAnswers) RoundTrip(req *http.Request) (*http.Response, error) {
	req, _ = t.add(req)
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	drop := t.lose > 0
	if drop {
		t.lose--
	}
	t.mu.Unlock()
	if !drop {
		return resp, nil
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return nil, timeoutError{}
}

// gateway answers the first len(answers) requests itself — as a gateway in front of oncepay
// would, the request never reaching it — and sends the others on.
type gateway struct {
	recorder
	next    http.RoundTripper
	mu      sync.Mutex
	answers []fakeAnswer
}

// fakeAnswer is a problem answer a gateway gives instead of oncepay.
type fakeAnswer struct {
	status     int
	code       string
	retryAfter string
}

func (g *gateway) RoundTrip(req *http.Request) (*http.Response, error) {
	req, _ = g.add(req)
	g.mu.Lock()
	var a *fakeAnswer
	if len(g.answers) > 0 {
		a, g.answers = &g.answers[0], g.answers[1:]
	}
	g.mu.Unlock()
	if a == nil {
		return g.next.RoundTrip(req)
	}
	h := http.Header{"Content-Type": {"application/problem+json"}}
	if a.retryAfter != "" {
		h.Set("Retry-After", a.retryAfter)
	}
	body := `{"type":"about:blank","title":"fake","status":` + itoa(a.status) + `,"code":"` + a.code + `"}`
	return &http.Response{StatusCode: a.status, Header: h, Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
}

// blackHole never answers: every request waits until its context ends.
type blackHole struct{ recorder }

func (b *blackHole) RoundTrip(req *http.Request) (*http.Response, error) {
	req, _ = b.add(req)
	<-req.Context().Done()
	return nil, req.Context().Err()
}

func itoa(n int) string {
	var b []byte
	for n > 0 || len(b) == 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(b)
}
