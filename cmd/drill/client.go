package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// paymentTopic is the contract's topic for payment notifications, keyed by trade_no.
const paymentTopic = "payment.notifications"

// requestTimeout bounds one HTTP call. It is generous because I4 is meant to run against a
// server slowed down with ONCEPAY_CHAOS_PAYMENT_DELAY.
const requestTimeout = 60 * time.Second

// maxBody is the most of a response body the drill reads; oncepay's answers are small.
const maxBody = 1 << 20

// client speaks oncepay's public contract and nothing else: the HTTP API, the signature
// payment channels put on notifications, and the payment.notifications Kafka topic.
type client struct {
	base   string
	http   *http.Client
	secret []byte
	// kafka publishes payment notifications; nil when the Kafka path is disabled.
	kafka *kafka.Writer
	// brokers are the addresses kafka writes to, kept for the preflight check.
	brokers []string
	// behind maps a sentinel's key to the key whose partition it must share (see balance).
	behind sync.Map
}

// newClient returns a client for cfg. It opens no connection yet.
func newClient(cfg config) *client {
	c := &client{
		base:   cfg.URL,
		secret: []byte(cfg.ChannelSecret),
		http: &http.Client{
			Timeout: requestTimeout,
			Transport: &http.Transport{
				Proxy: http.ProxyFromEnvironment,
				// The flash sale fires 50 copies at once; keep their connections for the
				// next scenario instead of churning through TIME_WAIT.
				MaxIdleConns:        128,
				MaxIdleConnsPerHost: 128,
				IdleConnTimeout:     30 * time.Second,
			},
		},
		brokers: cfg.Kafka,
	}
	if len(cfg.Kafka) > 0 {
		c.kafka = &kafka.Writer{
			Addr:         kafka.TCP(cfg.Kafka...),
			Topic:        paymentTopic,
			Balancer:     kafka.BalancerFunc(c.balance),
			RequiredAcks: kafka.RequireAll,
			BatchTimeout: 5 * time.Millisecond,
			MaxAttempts:  3,
			WriteTimeout: 10 * time.Second,
		}
	}
	return c
}

// balance places a message by its key with the Java client's partitioner (murmur2), so a
// copy lands where a channel's producer would put it. A sentinel goes to the partition of the
// key it follows instead, so that it queues behind that key's copies.
func (c *client) balance(msg kafka.Message, partitions ...int) int {
	key := msg.Key
	if k, ok := c.behind.Load(string(msg.Key)); ok {
		key = k.([]byte)
	}
	return kafka.Murmur2Balancer{}.Balance(kafka.Message{Key: key}, partitions...)
}

// publishBehind publishes value with key on the partition that afterKey's messages went to.
func (c *client) publishBehind(ctx context.Context, afterKey, key, requestID string, value []byte) error {
	c.behind.Store(key, []byte(afterKey))
	return c.kafka.WriteMessages(ctx, kafka.Message{
		Key:     []byte(key),
		Value:   value,
		Headers: []kafka.Header{{Key: "X-Request-Id", Value: []byte(requestID)}},
	})
}

// close releases the Kafka writer and idle connections.
func (c *client) close() error {
	c.http.CloseIdleConnections()
	if c.kafka != nil {
		return c.kafka.Close()
	}
	return nil
}

// sign returns the X-Signature value of a notification: the lowercase hex HMAC-SHA256 of the
// raw body with the channel secret, as CONTRACT.md specifies.
func sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// call is one HTTP request as the contract describes it.
type call struct {
	method string
	path   string
	// bearer is the API key or admin key to send; empty sends no Authorization header.
	bearer string
	// idemKey is the Idempotency-Key header; empty sends none.
	idemKey string
	// body is sent as-is, with Content-Type application/json; nil sends no body.
	body []byte
	// signed adds X-Signature over body, as a payment channel does.
	signed bool
	// requestID is sent as X-Request-Id, so a copy can be found in the server's logs.
	requestID string
}

// route names the call in reports, e.g. "POST /v1/payments/notify".
func (cl call) route() string { return cl.method + " " + cl.path }

// answer is what the server said to one call.
type answer struct {
	status int
	// outcome is the Idempotency-Outcome header: the idempotency layer that answered.
	outcome string
	// replayed is true when Idempotent-Replayed: true was present.
	replayed bool
	// code is the problem document's stable code, for error answers.
	code string
	body []byte
}

// do sends cl and reads the answer. An error means no answer (connection, timeout).
func (c *client) do(ctx context.Context, cl call) (answer, error) {
	var body io.Reader
	if cl.body != nil {
		body = bytes.NewReader(cl.body)
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, c.base+cl.path, body)
	if err != nil {
		return answer{}, err
	}
	if cl.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if cl.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+cl.bearer)
	}
	if cl.idemKey != "" {
		req.Header.Set("Idempotency-Key", cl.idemKey)
	}
	if cl.signed {
		req.Header.Set("X-Signature", sign(c.secret, cl.body))
	}
	if cl.requestID != "" {
		req.Header.Set("X-Request-Id", cl.requestID)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return answer{}, fmt.Errorf("%s: reading the answer: %w", cl.route(), err)
	}
	a := answer{
		status:   resp.StatusCode,
		outcome:  resp.Header.Get("Idempotency-Outcome"),
		replayed: strings.EqualFold(resp.Header.Get("Idempotent-Replayed"), "true"),
		body:     raw,
	}
	if a.status >= 400 {
		var p struct {
			Code string `json:"code"`
		}
		if json.Unmarshal(raw, &p) == nil {
			a.code = p.Code
		}
	}
	return a, nil
}

// expect sends cl, requires the status want and decodes the body into out (when out is not
// nil). It is for the set-up and read steps of a scenario, where anything else means the
// scenario cannot go on.
func (c *client) expect(ctx context.Context, cl call, want int, out any) (answer, error) {
	a, err := c.do(ctx, cl)
	if err != nil {
		return a, err
	}
	if a.status != want {
		return a, fmt.Errorf("%s answered %d %s, want %d%s", cl.route(), a.status, a.code, want, hint(a))
	}
	if out != nil {
		if err := json.Unmarshal(a.body, out); err != nil {
			return a, fmt.Errorf("%s: decoding the answer: %w", cl.route(), err)
		}
	}
	return a, nil
}

// hint explains the answers that mean the server is not ready for the drill rather than broken.
func hint(a answer) string {
	switch a.status {
	case http.StatusNotFound:
		if a.code == "" || a.code == "not_found" {
			return " (is this route served yet?)"
		}
	case http.StatusUnauthorized:
		return " (check --user-key, --admin-key and --channel-secret)"
	}
	return ""
}

// copyRecord is one duplicate copy the drill fired and what became of it. It keeps the timing
// (start offset and duration from the scenario's first copy) that the HTML report will draw.
type copyRecord struct {
	// Path is the delivery path the copy stands for, e.g. "gateway retry".
	Path string `json:"path"`
	// Via is "http" or "kafka".
	Via string `json:"via"`
	// Route is the HTTP method and path, or "kafka <topic>".
	Route string `json:"route"`
	// RequestID is the X-Request-Id the copy carried, to find it in the server's logs.
	RequestID string `json:"request_id"`
	// StartMS is when the copy left, in milliseconds after the scenario's first copy.
	StartMS float64 `json:"start_ms"`
	// DurationMS is how long the server (or the broker, for Kafka) took to answer.
	DurationMS float64 `json:"duration_ms"`
	// Status is the HTTP status; 0 for Kafka copies, whose answer is not observable.
	Status int `json:"status"`
	// Outcome is the Idempotency-Outcome header: the layer that answered.
	Outcome string `json:"outcome"`
	// Replayed is true when the answer carried Idempotent-Replayed: true.
	Replayed bool `json:"replayed"`
	// Code is the problem document's code for error answers.
	Code string `json:"code,omitempty"`
	// Ref is the order_id or recharge_id in the answer, when there was one.
	Ref string `json:"ref,omitempty"`
	// Error is set when the copy got no answer at all.
	Error string `json:"error,omitempty"`
}

// ms converts a duration to fractional milliseconds for the report.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// fireHTTP sends one copy and records it, timed from t0. When into is not nil, a 2xx body is
// also decoded into it.
func (c *client) fireHTTP(ctx context.Context, t0 time.Time, path string, cl call, into any) copyRecord {
	rec := copyRecord{Path: path, Via: "http", Route: cl.route(), RequestID: cl.requestID}
	start := time.Now()
	rec.StartMS = ms(start.Sub(t0))
	a, err := c.do(ctx, cl)
	rec.DurationMS = ms(time.Since(start))
	if err != nil {
		rec.Error = err.Error()
		return rec
	}
	rec.Status, rec.Outcome, rec.Replayed, rec.Code = a.status, a.outcome, a.replayed, a.code
	var ref struct {
		OrderID    flexID `json:"order_id"`
		RechargeID flexID `json:"recharge_id"`
	}
	if a.status < 300 && json.Unmarshal(a.body, &ref) == nil {
		rec.Ref = string(ref.OrderID)
		if rec.Ref == "" {
			rec.Ref = string(ref.RechargeID)
		}
	}
	if into != nil && a.status < 300 {
		if err := json.Unmarshal(a.body, into); err != nil {
			rec.Error = "decoding the answer: " + err.Error()
		}
	}
	return rec
}

// fireKafka publishes one copy of a payment notification to payment.notifications with key,
// and records it, timed from t0. Its duration is the broker's acknowledgement; whether the
// server's consumer took the copy as a duplicate is judged from the effect only.
func (c *client) fireKafka(ctx context.Context, t0 time.Time, path, key, requestID string, value []byte) copyRecord {
	rec := copyRecord{Path: path, Via: "kafka", Route: "kafka " + paymentTopic, RequestID: requestID}
	start := time.Now()
	rec.StartMS = ms(start.Sub(t0))
	err := c.kafka.WriteMessages(ctx, kafka.Message{
		Key:     []byte(key),
		Value:   value,
		Headers: []kafka.Header{{Key: "X-Request-Id", Value: []byte(requestID)}},
	})
	rec.DurationMS = ms(time.Since(start))
	if err != nil {
		rec.Error = err.Error()
	}
	return rec
}

// checkKafka verifies that a broker answers and knows the payment topic, so a dead broker is a
// connection error up front rather than six failed copies later.
func (c *client) checkKafka(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var errs []error
	for _, addr := range c.brokers {
		conn, err := kafka.DialContext(ctx, "tcp", addr)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		_, err = conn.ReadPartitions(paymentTopic)
		conn.Close()
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("topic %s on %s: %w", paymentTopic, addr, err))
	}
	return fmt.Errorf("kafka at %s: %w (use --kafka= to skip the Kafka path)", strings.Join(c.brokers, ","), errors.Join(errs...))
}

// counterPrefix selects the metrics the drill reports as evidence.
const counterPrefix = "oncepay_idempotency"

// counters fetches GET /metrics and returns the oncepay_idempotency* counter series.
func (c *client) counters(ctx context.Context) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics answered %d", resp.StatusCode)
	}
	return parseCounters(resp.Body, counterPrefix)
}

// parseCounters reads the Prometheus text exposition format and returns the value of every
// counter series whose name starts with prefix, keyed by `name{labels}` as exposed. A series
// counts as a counter when its family's # TYPE says so or, lacking a TYPE line, when its name
// ends in _total.
func parseCounters(r io.Reader, prefix string) (map[string]float64, error) {
	out := map[string]float64{}
	types := map[string]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), maxBody)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "#") {
			if f := strings.Fields(line); len(f) >= 4 && f[1] == "TYPE" {
				types[f[2]] = f[3]
			}
			continue
		}
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		series, value, ok := splitSample(line)
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(series, "{")
		typ, known := types[name]
		if !known {
			typ, known = types[strings.TrimSuffix(name, "_total")]
		}
		if (known && typ == "counter") || (!known && strings.HasSuffix(name, "_total")) {
			out[series] = value
		}
	}
	return out, sc.Err()
}

// splitSample splits `name{labels} value [timestamp]` into the series and its value. Label
// values may contain spaces, so the series ends at the closing brace when there is one.
func splitSample(line string) (series string, value float64, ok bool) {
	end := strings.IndexAny(line, " \t")
	if i := strings.LastIndex(line, "}"); i >= 0 {
		end = i + 1
	}
	if end <= 0 || end >= len(line) {
		return "", 0, false
	}
	fields := strings.Fields(line[end:])
	if len(fields) == 0 {
		return "", 0, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return "", 0, false
	}
	return line[:end], v, true
}

// counterDelta returns after-before for every series that moved. A series that appeared
// counts from zero.
func counterDelta(before, after map[string]float64) map[string]float64 {
	d := map[string]float64{}
	for k, v := range after {
		if diff := v - before[k]; diff != 0 {
			d[k] = diff
		}
	}
	return d
}

// flexID is a snowflake id. The contract sends ids as JSON strings; a number is accepted too,
// so that a drill run still judges the effect when a server gets that detail wrong.
type flexID string

// UnmarshalJSON accepts "123", 123 and null.
func (f *flexID) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*f = flexID(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	*f = flexID(n.String())
	return nil
}
