package drill

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/oncepay/oncepay/internal/platform/reportsig"
	"github.com/segmentio/kafka-go"
)

// paymentTopic is the contract's topic for payment notifications, keyed by trade_no.
const paymentTopic = "payment.notifications"

// paymentGroup is the contract's consumer group for paymentTopic. Its committed offsets tell
// the drill when the server has handled a copy it published.
const paymentGroup = "oncepay-payments"

// requestTimeout bounds one HTTP call. It is generous because I4 is meant to run against a
// server slowed down with ONCEPAY_CHAOS_PAYMENT_DELAY, and because on the embedded SQLite every
// slowed payment holds the database's only write lock, so concurrent scenarios queue behind it.
const requestTimeout = 60 * time.Second

// maxBody is the most of a response body the drill reads; oncepay's answers are small.
const maxBody = 1 << 20

// client speaks oncepay's public contract and nothing else: the HTTP API, the signature
// payment channels put on notifications, and the payment.notifications Kafka topic with its
// consumer group.
type client struct {
	base string
	http *http.Client
	// fresh keeps no connection: it sends the calls marked fresh.
	fresh  *http.Client
	secret []byte
	// kafka publishes payment notifications and reads the consumer group's offsets; nil when
	// the Kafka path is disabled.
	kafka *kafka.Client
	// brokers are the addresses kafka talks to, for messages.
	brokers []string
	// partitions is paymentTopic's partition count, learned by checkKafka.
	partitions int
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
				// The scenarios run at the same time and the flash sale alone fires 50 copies;
				// keep their connections instead of churning through TIME_WAIT.
				MaxIdleConns:        256,
				MaxIdleConnsPerHost: 256,
				IdleConnTimeout:     30 * time.Second,
			},
		},
		brokers: cfg.Kafka,
		fresh:   &http.Client{Timeout: requestTimeout, Transport: &http.Transport{DisableKeepAlives: true}},
	}
	if len(cfg.Kafka) > 0 {
		c.kafka = &kafka.Client{Addr: kafka.TCP(cfg.Kafka...), Timeout: 10 * time.Second, Transport: &kafka.Transport{}}
	}
	return c
}

// partitionFor is the partition a channel's producer puts key on: the Java client's murmur2
// partitioner, which every copy of one trade_no follows, so that they queue in one partition
// as real redeliveries do.
func partitionFor(key string, partitions int) int {
	ids := make([]int, partitions)
	for i := range ids {
		ids[i] = i
	}
	return kafka.Murmur2Balancer{}.Balance(kafka.Message{Key: []byte(key)}, ids...)
}

// publish writes one notification with key to its partition, signed like its HTTP copies
// (X-Signature), waits for every in-sync replica, and returns where it landed.
func (c *client) publish(ctx context.Context, key, requestID string, value []byte) (placement, error) {
	p := placement{Partition: partitionFor(key, c.partitions)}
	resp, err := c.kafka.Produce(ctx, &kafka.ProduceRequest{
		Topic:        paymentTopic,
		Partition:    p.Partition,
		RequiredAcks: kafka.RequireAll,
		Records: kafka.NewRecordReader(kafka.Record{
			Key:     kafka.NewBytes([]byte(key)),
			Value:   kafka.NewBytes(value),
			Headers: []kafka.Header{{Key: "X-Request-Id", Value: []byte(requestID)}, {Key: "X-Signature", Value: []byte(sign(c.secret, "trade", value))}},
		}),
	})
	if err == nil {
		err = resp.Error
	}
	if err != nil {
		return p, fmt.Errorf("publishing to %s[%d]: %w", paymentTopic, p.Partition, err)
	}
	p.Offset = resp.BaseOffset
	return p, nil
}

// committed returns the consumer group's committed offset of each of partitions: the offset of
// the next message it will handle, so every message below it has been handled. A partition the
// group never committed is absent.
func (c *client) committed(ctx context.Context, partitions []int) (map[int]int64, error) {
	resp, err := c.kafka.OffsetFetch(ctx, &kafka.OffsetFetchRequest{
		GroupID: paymentGroup,
		Topics:  map[string][]int{paymentTopic: partitions},
	})
	if err == nil {
		err = resp.Error
	}
	if err != nil {
		return nil, fmt.Errorf("offsets of group %s: %w", paymentGroup, err)
	}
	out := map[int]int64{}
	for _, p := range resp.Topics[paymentTopic] {
		if p.Error == nil && p.CommittedOffset >= 0 {
			out[p.Partition] = p.CommittedOffset
		}
	}
	return out, nil
}

// close releases idle HTTP and Kafka connections.
func (c *client) close() {
	c.http.CloseIdleConnections()
	if c.kafka != nil {
		c.kafka.Transport.(*kafka.Transport).CloseIdleConnections()
	}
}

// sign returns the X-Signature value of a report of kind, signed now with the channel
// secret (docs/contract.md): t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<kind>.<body>">.
// Every attempt is signed afresh, as a channel does.
func sign(secret []byte, kind string, body []byte) string {
	return reportsig.Sign(string(secret), time.Now(), kind, body)
}

// kindOf is the kind a report posted to path is signed for: the lab's replicas take the same
// signed copy as the real route they stand beside.
func kindOf(path string) string {
	switch {
	case strings.Contains(path, "/recharges/"):
		return "recharge"
	case strings.Contains(path, "/refunds/"):
		return "refund"
	}
	return "trade"
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
	// base, when set, is the server the call goes to instead of oncepay: the channel
	// simulator's /sim/ controls (I8, I9), I11's gateway, I14's instances.
	base string
	// fresh sends the call on a new connection, closed after it: the servers a run starts and
	// stops (I11's gateway, I14's instances) listen on ports that another may take next, where
	// a kept connection to the old one would be answered EOF, and a POST is not retried.
	fresh bool
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
	base := c.base
	if cl.base != "" {
		base = cl.base
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, base+cl.path, body)
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
		req.Header.Set("X-Signature", sign(c.secret, kindOf(cl.path), cl.body))
	}
	if cl.requestID != "" {
		req.Header.Set("X-Request-Id", cl.requestID)
	}
	hc := c.http
	if cl.fresh {
		hc = c.fresh
	}
	resp, err := hc.Do(req)
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
// (start offset and duration from the scenario's first copy) that the HTML report draws.
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
	// ConsumedMS, for a Kafka copy, is when the server's consumer group was seen committed
	// past it, in milliseconds after the scenario's first copy: it had been handled by then
	// (to within the drill's 50 ms polling). Zero when that was not confirmed.
	ConsumedMS float64 `json:"consumed_ms,omitempty"`
	// Placement is where a Kafka copy landed in the topic; nil for HTTP copies.
	Placement *placement `json:"placement,omitempty"`
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
	// sent is when the copy left, to time its consumption against.
	sent time.Time
}

// placement is a Kafka message's partition and offset.
type placement struct {
	Partition int   `json:"partition"`
	Offset    int64 `json:"offset"`
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
// and records it, timed from t0. Its duration is the broker's acknowledgement; when the
// server's consumer handled it is learned later from the group's offsets (awaitConsumed),
// and what it made of it is judged from the effect only.
func (c *client) fireKafka(ctx context.Context, t0 time.Time, path, key, requestID string, value []byte) copyRecord {
	rec := copyRecord{Path: path, Via: "kafka", Route: "kafka " + paymentTopic, RequestID: requestID}
	rec.sent = time.Now()
	rec.StartMS = ms(rec.sent.Sub(t0))
	p, err := c.publish(ctx, key, requestID, value)
	rec.DurationMS = ms(time.Since(rec.sent))
	if err != nil {
		rec.Error = err.Error()
		return rec
	}
	rec.Placement = &p
	return rec
}

// checkKafka verifies that a broker answers and knows the payment topic, and learns its
// partitions, so a dead broker is a connection error up front rather than six failed copies
// later.
func (c *client) checkKafka(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := c.kafka.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{paymentTopic}})
	if err == nil {
		for _, t := range resp.Topics {
			switch {
			case t.Name != paymentTopic:
			case t.Error != nil:
				err = t.Error
			case len(t.Partitions) == 0:
				err = errors.New("it has no partitions")
			default:
				c.partitions = len(t.Partitions)
				return nil
			}
		}
		if err == nil {
			err = errors.New("the broker does not list it")
		}
	}
	return fmt.Errorf("kafka at %s, topic %s: %w (use --kafka= to skip the Kafka path)", strings.Join(c.brokers, ","), paymentTopic, err)
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
