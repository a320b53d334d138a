package webhook

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
)

// The outcomes of an attempt, as the attempts metric labels them.
const (
	// OutcomeOK is a 2xx: the delivery succeeded.
	OutcomeOK = "2xx"
	// OutcomeStatus is an answer that is not 2xx (a redirect included: never followed).
	OutcomeStatus = "non_2xx"
	// OutcomeTimeout is no answer within ONCEPAY_WEBHOOK_TIMEOUT.
	OutcomeTimeout = "timeout"
	// OutcomeError is no answer at all: a refused connection, a TLS or DNS failure, an
	// attempt abandoned because its lease was lost or the instance stopped.
	OutcomeError = "error"
)

// Metrics are the webhook metrics of one instance (docs/contract.md, "Metrics"). The attempt
// counters and histograms count this instance's attempts; the queue and feed gauges are read
// from the database at each scrape, so every instance reports the same, cluster-wide values.
type Metrics struct {
	attempts *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	sequence prometheus.Histogram
	circuit  *prometheus.GaugeVec
}

// NewMetrics registers the webhook metrics with reg; the gauges read db at each scrape.
func NewMetrics(reg prometheus.Registerer, db *gorm.DB) *Metrics {
	m := &Metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncepay_webhook_attempts_total",
			Help: "Webhook attempts sent by this instance, by endpoint and outcome (2xx, non_2xx, timeout, error).",
		}, []string{"endpoint_id", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "oncepay_webhook_attempt_duration_seconds",
			Help:    "Webhook attempt latency by endpoint, from the request sent to the answer's body read (or the failure).",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"endpoint_id"}),
		sequence: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "oncepay_webhook_feed_delay_seconds",
			Help:    "Time from an event's creation in its business transaction to its place in the events feed, per event this instance sequenced.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
		circuit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "oncepay_webhook_circuit_open",
			Help: "1 while this instance's circuit for the endpoint is open (its last attempt got no answer: one probe at a time, after a back-off), 0 once an answer closed it.",
		}, []string{"endpoint_id"}),
	}
	reg.MustRegister(m.attempts, m.latency, m.sequence, m.circuit, &queueCollector{db: db})
	return m
}

// attempt counts one attempt to endpoint with what it came back with.
func (m *Metrics) attempt(endpoint int64, r result) {
	if m == nil {
		return
	}
	label := ids.Format(endpoint)
	m.attempts.WithLabelValues(label, r.outcome).Inc()
	m.latency.WithLabelValues(label).Observe(r.latency.Seconds())
}

// circuitOpen sets endpoint's circuit gauge.
func (m *Metrics) circuitOpen(endpoint int64, open bool) {
	if m == nil {
		return
	}
	v := 0.0
	if open {
		v = 1
	}
	m.circuit.WithLabelValues(ids.Format(endpoint)).Set(v)
}

// sequenced observes the delay of each event of a batch placed in the feed at now.
func (m *Metrics) sequenced(now time.Time, batch []pendingEvent) {
	if m == nil {
		return
	}
	for _, ev := range batch {
		m.sequence.Observe(max(0, now.Sub(ev.CreatedAt).Seconds()))
	}
}

var (
	queueDepthDesc = prometheus.NewDesc("oncepay_webhook_queue_depth",
		"Pending webhook deliveries per endpoint (due or waiting for a retry; a disabled endpoint's wait until it is enabled).",
		[]string{"endpoint_id", "status"}, nil)
	oldestPendingDesc = prometheus.NewDesc("oncepay_webhook_oldest_pending_seconds",
		"Age of the oldest pending webhook delivery per endpoint, from the delivery's creation; 0 with none.",
		[]string{"endpoint_id", "status"}, nil)
	feedLagDesc = prometheus.NewDesc("oncepay_webhook_feed_lag_seconds",
		"Age of the oldest committed event not yet placed in the events feed; 0 with none. The contract promises about ONCEPAY_WEBHOOK_INTERVAL.",
		nil, nil)
)

// queueCollector reads the queues and the feed's lag from the database at each scrape, within
// five seconds — half of Prometheus's default scrape timeout: a scrape never waits longer on a
// slow database, it reports nothing instead (a busy 2-core machine took over a second).
type queueCollector struct{ db *gorm.DB }

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueDepthDesc
	ch <- oldestPendingDesc
	ch <- feedLagDesc
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.collect(ctx, ch); err != nil {
		slog.WarnContext(ctx, "webhook metrics: the queues could not be read", "err", err)
	}
}

// queueRow is one endpoint's count of pending deliveries.
type queueRow struct {
	ID      int64
	Status  Status
	Pending int64
}

func (c *queueCollector) collect(ctx context.Context, ch chan<- prometheus.Metric) error {
	db := c.db.WithContext(ctx)
	now, err := database.Now(ctx, db)
	if err != nil {
		return err
	}
	var rows []queueRow
	err = db.Table("webhook_endpoints e").
		Select("e.id AS id, e.status AS status, COUNT(d.id) AS pending").
		Joins("LEFT JOIN webhook_deliveries d ON d.endpoint_id = e.id AND d.status = ?", Pending).
		Group("e.id, e.status").Scan(&rows).Error
	if err != nil {
		return err
	}
	for _, r := range rows {
		labels := []string{ids.Format(r.ID), string(r.Status)}
		ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, float64(r.Pending), labels...)
		age := 0.0
		if r.Pending > 0 {
			var oldest Delivery
			if err := db.Where("endpoint_id = ? AND status = ?", r.ID, Pending).Order("created_at").Take(&oldest).Error; err != nil {
				return err
			}
			age = max(0, now.Sub(oldest.CreatedAt).Seconds())
		}
		ch <- prometheus.MustNewConstMetric(oldestPendingDesc, prometheus.GaugeValue, age, labels...)
	}
	var waiting []outbox.Event
	if err := db.Select("id, created_at").Where("seq IS NULL").Order("created_at").Limit(1).Find(&waiting).Error; err != nil {
		return err
	}
	lag := 0.0
	if len(waiting) == 1 {
		lag = max(0, now.Sub(waiting[0].CreatedAt).Seconds())
	}
	ch <- prometheus.MustNewConstMetric(feedLagDesc, prometheus.GaugeValue, lag)
	return nil
}
