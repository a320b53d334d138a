package notify

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
	"github.com/oncepay/oncepay/internal/anomaly"
)

// Outcome says what a report did to the state it is about.
type Outcome int

// The outcomes of Applier.Apply. All four are answered 200 success, so that the channel stops
// sending; Duplicate and Kept carry Idempotency-Outcome: state_rejected.
const (
	// Applied: the report moved its order, recharge or refund on now.
	Applied Outcome = iota + 1
	// Duplicate: the state already shows this very report — the order paid by this trade,
	// the refund ended this way — a copy that outlived its dedup record (I6, I13).
	Duplicate
	// Kept: the state had moved on (an order cancelled, closed or paid by another trade, a
	// refund ended the other way): nothing changed, and the report is kept as an anomaly for
	// refund or for an operator (I5).
	Kept
	// Ignored: a status that ends nothing (WAIT_BUYER_PAY, PROCESSING).
	Ignored
)

// Applier applies the reports of one kind, in tx: the guard's transaction, whose dedup record
// commits with the change (I3). It places that record itself, as an idempotent.Work does:
// record(outcome) after its new rows and before its contended ones (an order's status, its
// stock, a balance), called once on every path that returns nil. It returns the Outcome it
// recorded, a Refusal (the report cannot be applied and stores nothing under its key), or
// any other error (nothing stored; the sender retries).
type Applier interface {
	Apply(ctx context.Context, tx *gorm.DB, r Report, record func(Outcome) error) (Outcome, error)
}

// Refusal is a report the work turned away — an amount that differs, a number nobody issued,
// a trade number another owner holds. Nothing is stored under its key, so that the channel's
// correct report still applies; Anomaly, when set, is recorded on its own, once per kind and
// channel + number, so that nothing the channel said is lost.
type Refusal struct {
	// Err is the client-facing error (an *apperr.Error with a 4xx status).
	Err error
	// Anomaly is what to keep of the report, or nil.
	Anomaly *anomaly.Anomaly
}

// Refuse returns the Refusal of err, keeping a when it is not nil.
func Refuse(err error, a *anomaly.Anomaly) error { return &Refusal{Err: err, Anomaly: a} }

func (r *Refusal) Error() string { return r.Err.Error() }

// Unwrap returns the client-facing error.
func (r *Refusal) Unwrap() error { return r.Err }

// Config wires a Port.
type Config struct {
	// Guard makes every report exactly-once.
	Guard *idempotent.Guard
	// DB is read for claims outside a report's transaction.
	DB *gorm.DB
	// Anomalies keeps what cannot be applied.
	Anomalies *anomaly.Recorder
	// Secrets are the configured channels (ONCEPAY_CHANNELS) and the secret each signs with.
	Secrets map[string]string
	// Tolerance is how far an HTTP report's signed timestamp may lie from now
	// (ONCEPAY_SIGNATURE_TOLERANCE).
	Tolerance time.Duration
	// KafkaWindow is how old a Kafka copy's signed timestamp may be: a message may wait in its
	// topic as long as any path may redeliver (ONCEPAY_MAX_REDELIVERY_WINDOW).
	KafkaWindow time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Port receives reports over HTTP and Kafka and applies the ones oncepay learns by asking the
// channel, through one guard call each.
type Port struct {
	cfg      Config
	appliers map[Kind]Applier
}

// New returns the port of cfg, applying each kind of report through its Applier.
func New(cfg Config, appliers map[Kind]Applier) *Port {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Port{cfg: cfg, appliers: appliers}
}

// Known reports whether channel is a configured channel.
func (p *Port) Known(channel string) bool {
	_, ok := p.cfg.Secrets[channel]
	return ok
}

// runner is the guard call that runs a report's work: Guard.Do, or Guard.Message for a Kafka
// copy, whose Redis marker is the consumer's first filter.
type runner func(ctx context.Context, req idempotent.Request, work idempotent.Work) (idempotent.Result, error)

// deliver applies r once, via the path named by via, and answers it: success (also for a
// duplicate), a refusal with nothing stored (its anomaly recorded), or a key reused — which
// is a trade_conflict when the number belongs to another owner.
// The outcome is the work's, when this call executed it.
func (p *Port) deliver(ctx context.Context, r Report, via string, run runner) (idempotent.Result, Outcome, error) {
	apply, ok := p.appliers[r.Kind]
	if !ok {
		return idempotent.Result{}, 0, fmt.Errorf("notify: no applier for %s reports", r.Kind)
	}
	req := idempotent.Request{Key: r.Key(), Fingerprint: r.Fingerprint(), Via: via, Reject: storeNoRefusal, Refused: isRefusal}
	var outcome Outcome
	res, err := run(ctx, req, func(ctx context.Context, tx *gorm.DB, record func(idempotent.Response) error) error {
		if r.Ends() {
			if err := claim(ctx, tx, r); err != nil {
				return err
			}
		}
		var err error
		outcome, err = apply.Apply(ctx, tx, r, func(o Outcome) error { return record(success(o)) })
		return err
	})
	if res.Outcome != idempotent.Executed {
		outcome = 0
	}
	return res, outcome, p.explain(ctx, r, err)
}

// storeNoRefusal is the guard's Reject for reports: nothing a report's work refuses is
// stored (docs/contract.md), so that a corrected copy, or the same copy once the order it
// names is visible, still applies.
func storeNoRefusal(context.Context, error) (idempotent.Response, bool) {
	return idempotent.Response{}, false
}

// isRefusal reports whether err is a Refusal of a report's work.
func isRefusal(err error) bool {
	var refused *Refusal
	return errors.As(err, &refused)
}

// explain completes the guard's error for r: a refusal's anomaly is recorded, on its own
// since its transaction rolled back; a key reused by another owner than the number's is a
// trade_conflict, kept as an anomaly too.
func (p *Port) explain(ctx context.Context, r Report, err error) error {
	var refused *Refusal
	switch {
	case err == nil:
		return nil
	case errors.As(err, &refused):
		if refused.Anomaly != nil {
			if aerr := p.cfg.Anomalies.RecordAlone(ctx, *refused.Anomaly); aerr != nil {
				return aerr
			}
		}
		return refused.Err
	case errors.Is(err, idempotent.ErrKeyReused):
		owner, found, cerr := claimOf(ctx, p.cfg.DB, r)
		switch {
		case cerr != nil:
			return cerr
		case !found || owner.owns(r):
			return err // the same owner with another body: an ordinary key reused
		}
		if aerr := p.cfg.Anomalies.RecordAlone(ctx, *conflictAnomaly(r, owner)); aerr != nil {
			return aerr
		}
		return ErrTradeConflict.Withf("%s", conflictDetail(r, owner))
	}
	return err
}

// Settle applies r, a report oncepay learned by asking the channel (a query's answer, a line
// of the daily bill), exactly as the channel's own report would be: the same key, the same
// fingerprint, the same work, so that whichever comes first applies it and the others replay
// its answer (I1, I9). applied reports whether this call moved r's order, recharge or refund.
func (p *Port) Settle(ctx context.Context, r Report, via string) (applied bool, err error) {
	if err := r.Validate(); err != nil {
		return false, fmt.Errorf("settle %s %s: %w", r.Kind, r.Number, err)
	}
	_, outcome, err := p.deliver(ctx, r, via, p.cfg.Guard.Do)
	if err != nil {
		return false, fmt.Errorf("settle %s %s %s: %w", r.Channel, r.Kind, r.Number, err)
	}
	return outcome == Applied, nil
}

// successBody is the answer channels expect, for first deliveries and duplicates alike.
var successBody = []byte(`{"result":"success"}` + "\n")

// success is the stored answer of a report: 200 {"result":"success"}, marked state_rejected
// when the state had moved on (Duplicate, Kept).
func success(o Outcome) idempotent.Response {
	resp := idempotent.Response{Status: http.StatusOK, Header: map[string]string{"Content-Type": "application/json"}, Body: successBody}
	if o == Duplicate || o == Kept {
		resp.Header[httpkey.HeaderOutcome] = string(idempotent.StateRejected)
	}
	return resp
}

// SettleFunc is Port.Settle, as the services that learn of reports by asking the channel
// (payment.Trades, refund.Service) take it: they hold the port's function, never the guard.
type SettleFunc func(ctx context.Context, r Report, via string) (applied bool, err error)
