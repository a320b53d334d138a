package idempotent

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	outcomes        *prometheus.CounterVec
	lockExtensions  *prometheus.CounterVec
	lockLost        prometheus.Counter
	redisErrors     *prometheus.CounterVec
	retries         prometheus.Counter
	busy            prometheus.Counter
	indefinite      prometheus.Counter
	purged          prometheus.Counter
	attemptsDropped prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idempotency_outcomes_total",
			Help: "Attempts at idempotent writes by biz type, the layer that answered, and outcome.",
		}, []string{"biz_type", "layer", "outcome"}),
		lockExtensions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idempotency_lock_extensions_total",
			Help: "Watchdog renewals of idempotency locks by result (ok, failed).",
		}, []string{"result"}),
		lockLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idempotency_lock_lost_total",
			Help: "Locks lost while their work ran; the work was cancelled (I4).",
		}),
		redisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idempotency_redis_errors_total",
			Help: "Redis failures by layer; in degrade mode the layer stepped aside.",
		}, []string{"layer"}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idempotency_tx_retries_total",
			Help: "Dedup transactions run again after the database aborted them (deadlock, certification conflict) or could not serve them (node not ready).",
		}),
		busy: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idempotency_tx_busy_total",
			Help: "Attempts answered unavailable because the database kept aborting or refusing their transaction past the retry budget, or a statement waited out the lock wait timeout.",
		}),
		indefinite: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idempotency_tx_indefinite_total",
			Help: "COMMITs whose answer was lost with their connection; the guard read the record to learn whether they applied.",
		}),
		purged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idempotency_purged_records_total",
			Help: "Dedup records deleted by the purge job (I6).",
		}),
		attemptsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idempotency_attempt_log_dropped_total",
			Help: "Attempts left out of their key's attempt log because Redis did not keep up with the log's queue.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.outcomes, m.lockExtensions, m.lockLost, m.redisErrors, m.retries, m.busy, m.indefinite, m.purged, m.attemptsDropped)
	}
	return m
}
