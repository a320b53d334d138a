// Package notify is oncepay's one inbound port for what a payment channel reports: that a
// trade was paid (for an order), that a recharge was paid, that a refund ended. Every report,
// whichever path it took — the channel's HTTP callback and its retries, a gateway's retry, the
// payment.notifications Kafka topic, or oncepay's own question to the channel (a query, the
// daily bill) — is parsed by one parser, refused or admitted by one signature check, named by
// one key (channel + the channel's number), fingerprinted over its canonical form and applied
// through the guard once (I1). A number names one payment, whatever it pays: the first report
// that applies claims it for its order, recharge or refund, and every later report naming
// another owner is a trade_conflict, with or without its dedup record (I13).
//
// The domains keep only their Applier: Apply(ctx, tx, report) in the guard's transaction.
// A notification reads in port.go — its HTTP Handler (or kafka.go's consumer), its parser,
// deliver and the claim — then the domain's Apply.
package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
	"github.com/oncepay/oncepay/internal/anomaly"
	idem "github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/reportsig"
	"github.com/oncepay/oncepay/internal/platform/web"
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

// The HTTP route: what a channel's callback goes through before its key is claimed.

// Handler serves the HTTP route of kind's reports (Routes). It reads, top to bottom, what
// every report goes through before its key is claimed, so that a refused copy stores nothing
// and the channel's correct copy still applies:
//
//  1. the body, within the body limit (413);
//  2. the channel it names, which must be configured (400 unknown_channel) — its secret is the
//     one that signed the report;
//  3. the signature over timestamp, kind and body, the timestamp within
//     ONCEPAY_SIGNATURE_TOLERANCE (401 invalid_signature);
//  4. the report parsed and validated completely (400 invalid_request);
//
// then the report is applied once through the guard (deliver) and answered through the kit's
// HTTP adapter with oncepay's settings (idem.HTTP): its problems, its Retry-After.
func (p *Port) Handler(kind Kind) http.HandlerFunc {
	answer := idem.HTTP(p.cfg.Guard)
	return func(w http.ResponseWriter, req *http.Request) {
		body, err := web.ReadBody(req)
		if err != nil {
			answer.Reject(w, req, err)
			return
		}
		secret, err := p.secretFor(body)
		if err != nil {
			answer.Reject(w, req, err)
			return
		}
		if sigs := req.Header.Values(reportsig.Header); len(sigs) > 1 {
			answer.Reject(w, req, apperr.ErrInvalidSignature.Withf("send one X-Signature header, not %d", len(sigs)))
			return
		}
		if err := reportsig.Verify(secret, req.Header.Get(reportsig.Header), string(kind), body, p.cfg.Now(), p.cfg.Tolerance); err != nil {
			answer.Reject(w, req, signatureError(err))
			return
		}
		r, err := Parse(kind, body)
		if err != nil {
			answer.Reject(w, req, err)
			return
		}
		res, _, err := p.deliver(req.Context(), r, "http", p.cfg.Guard.Do)
		answer.Write(w, req, res, err)
	}
}

// secretFor returns the secret of the channel body names: the channel is read before the
// signature is checked, since each channel signs with its own secret. A body that is not a
// JSON object with a channel in canonical form is invalid_request; a channel that is not
// configured is unknown_channel. Whatever this lenient read picks, the strict parse after
// the signature either refuses the body or agrees with it (it refuses duplicate and
// case-folded names).
func (p *Port) secretFor(body []byte) (string, error) {
	var peek struct {
		Channel string `json:"channel"`
	}
	if err := json.Unmarshal(body, &peek); err != nil {
		return "", apperr.ErrInvalidRequest.Withf("invalid JSON body: a report is a JSON object")
	}
	if err := web.CheckChannel("channel", peek.Channel); err != nil {
		return "", err
	}
	secret, ok := p.cfg.Secrets[peek.Channel]
	if !ok {
		return "", ErrUnknownChannel.Withf("channel %q is not one of ONCEPAY_CHANNELS", peek.Channel)
	}
	return secret, nil
}

// signatureError is the client-facing error of a refused signature.
func signatureError(err error) error {
	switch {
	case errors.Is(err, reportsig.ErrStale):
		return apperr.ErrInvalidSignature.Withf("X-Signature's timestamp t is too far from the server's clock (ONCEPAY_SIGNATURE_TOLERANCE): sign every attempt afresh")
	case errors.Is(err, reportsig.ErrMalformed):
		return apperr.ErrInvalidSignature.Withf("%s", reportsig.ErrMalformed.Error())
	}
	return apperr.ErrInvalidSignature.Withf("X-Signature does not match the body, this kind of report and t")
}

// The report: its kinds, its one parser, its key and fingerprint.

// Kind is what a report is about. It is signed with the report (reportsig), so a report
// signed for one kind is refused on another's route.
type Kind string

// The kinds of report.
const (
	// Trade reports that a channel trade paid an order (/v1/payments/notify, the
	// payment.notifications topic, a query, the bill).
	Trade Kind = "trade"
	// Recharge reports that a channel trade paid a recharge (/v1/recharges/notify).
	Recharge Kind = "recharge"
	// Refund reports that a refund ended at the channel (/v1/refunds/notify, a query).
	Refund Kind = "refund"
)

// Routes are the HTTP routes of each kind.
var Routes = map[Kind]string{
	Trade:    "/v1/payments/notify",
	Recharge: "/v1/recharges/notify",
	Refund:   "/v1/refunds/notify",
}

// The biz types of report keys: trades and recharges share the channel's trade numbers.
const (
	BizTypeTrade  = "channel.trade"
	BizTypeRefund = "channel.refund"
)

// StatusSuccess is the status that pays a trade or a recharge, or ends a refund well.
const StatusSuccess = "SUCCESS"

// Report is one channel report, whatever its kind.
type Report struct {
	// Kind is what the report is about.
	Kind Kind
	// Channel is the channel that sent it, one of the configured channels.
	Channel string
	// Number is the channel's own number: trade_no (trades, recharges) or refund_no.
	Number string
	// OutNo is oncepay's number the channel was given: out_trade_no (an order or recharge id)
	// or out_refund_no.
	OutNo string
	// Amount is in cents.
	Amount int64
	// Status is the channel's status: SUCCESS, or any other, which is acknowledged and
	// changes nothing for trades and recharges (FAILED and CLOSED end a refund badly).
	Status string
}

// ErrUnknownChannel is a report from a channel oncepay is not configured for
// (ONCEPAY_CHANNELS): 400, nothing stored, nothing applied.
var ErrUnknownChannel = apperr.New(http.StatusBadRequest, "unknown_channel", "the report names a channel oncepay is not configured for")

// tradeWire and refundWire are the JSON forms of reports (docs/contract.md), field for field.
type tradeWire struct {
	Channel    string `json:"channel"`
	TradeNo    string `json:"trade_no"`
	OutTradeNo string `json:"out_trade_no"`
	Amount     int64  `json:"amount"`
	Status     string `json:"status"`
}

type refundWire struct {
	Channel     string `json:"channel"`
	RefundNo    string `json:"refund_no"`
	OutRefundNo string `json:"out_refund_no"`
	Amount      int64  `json:"amount"`
	Status      string `json:"status"`
}

// MaxAmount is the largest amount a report may carry, in cents (10^10).
const MaxAmount = 10_000_000_000

// Parse decodes and validates body, a report of kind, completely — before it is keyed, so
// that a malformed copy is refused (400) and stores nothing, and the channel's correct copy
// still applies: strict JSON (web.DecodeBytes), the channel in its canonical form, the status
// (which may become part of the key), the numbers' lengths (their columns' widths) and the
// amount's range.
func Parse(kind Kind, body []byte) (Report, error) {
	var r Report
	switch kind {
	case Trade, Recharge:
		var w tradeWire
		if err := web.DecodeBytes(body, &w); err != nil {
			return Report{}, err
		}
		r = Report{Kind: kind, Channel: w.Channel, Number: w.TradeNo, OutNo: w.OutTradeNo, Amount: w.Amount, Status: w.Status}
	case Refund:
		var w refundWire
		if err := web.DecodeBytes(body, &w); err != nil {
			return Report{}, err
		}
		r = Report{Kind: kind, Channel: w.Channel, Number: w.RefundNo, OutNo: w.OutRefundNo, Amount: w.Amount, Status: w.Status}
	default:
		return Report{}, apperr.ErrInvalidRequest.Withf("unknown kind of report %q", kind)
	}
	return r, r.Validate()
}

// Validate checks every field of r: what Parse checks after decoding, and what a report
// built from a query's answer must hold as well.
func (r Report) Validate() error {
	number, out := r.fieldNames()
	if err := web.CheckChannel("channel", r.Channel); err != nil {
		return err
	}
	if err := web.CheckStatus("status", r.Status); err != nil {
		return err
	}
	switch {
	case r.Number == "" || len(r.Number) > 128:
		return apperr.ErrInvalidRequest.Withf("%s must be 1..128 characters", number)
	case r.OutNo == "" || len(r.OutNo) > 128:
		return apperr.ErrInvalidRequest.Withf("%s must be 1..128 characters", out)
	case r.Amount < 1 || r.Amount > MaxAmount:
		return apperr.ErrInvalidRequest.Withf("amount must be 1..10^10 cents")
	}
	return nil
}

// fieldNames are the JSON names of r's two numbers.
func (r Report) fieldNames() (number, out string) {
	if r.Kind == Refund {
		return "refund_no", "out_refund_no"
	}
	return "trade_no", "out_trade_no"
}

// Body is r's canonical JSON form: the fields of its kind, in their fixed order. The channel
// simulator, drills and tests send it; its fingerprint is every path's fingerprint.
func (r Report) Body() []byte {
	var v any = tradeWire{Channel: r.Channel, TradeNo: r.Number, OutTradeNo: r.OutNo, Amount: r.Amount, Status: r.Status}
	if r.Kind == Refund {
		v = refundWire{Channel: r.Channel, RefundNo: r.Number, OutRefundNo: r.OutNo, Amount: r.Amount, Status: r.Status}
	}
	b, _ := json.Marshal(v) // strings and an int64 always marshal
	return b
}

// Final reports whether r's status is the one its key is the channel's number alone for:
// SUCCESS. A refund's FAILED or CLOSED ends it too, but is keyed apart like every other
// status (Key).
func (r Report) Final() bool { return r.Status == StatusSuccess }

// Ends reports whether r's status ends what it is about: SUCCESS for every kind, and FAILED
// or CLOSED for a refund. Only such a report claims its number (claim).
func (r Report) Ends() bool {
	return r.Final() || (r.Kind == Refund && (r.Status == "FAILED" || r.Status == "CLOSED"))
}

// space is the number space of r's Number: trades and recharges share the channel's trade
// numbers — one number names one payment, whatever it pays — and refunds have their own.
func (r Report) space() string {
	if r.Kind == Refund {
		return "refund"
	}
	return "trade"
}

// Key is r's idempotency key: the channel's number, never a header or a request id, so
// that every copy of one report — the channel's retry, a gateway's, a redelivery over Kafka,
// a query's answer — converges on one dedup record (I1): scope channel:<channel>, biz type
// channel.trade or channel.refund (a trade number is one key whether it pays an order or a
// recharge), biz key the number, byte for byte.
//
// A report whose status is not SUCCESS (WAIT_BUYER_PAY, PROCESSING, a refund's FAILED) is
// keyed apart, its status in the scope — channel:<channel>#<status> — so that its stored
// answer never makes the SUCCESS report of the same number a key reused with another body.
// The status stays out of the biz key: a number is the channel's to choose and may hold any
// character. A channel name has no '#' or ':' and a status no ':' (web.CheckChannel,
// web.CheckStatus), so no two reports share a key.
func (r Report) Key() idempotent.Key {
	scope := "channel:" + r.Channel
	if !r.Final() {
		scope += "#" + r.Status
	}
	bizType := BizTypeTrade
	if r.Kind == Refund {
		bizType = BizTypeRefund
	}
	return idempotent.Key{Scope: scope, BizType: bizType, BizKey: r.Number}
}

// Fingerprint is the fingerprint of r's canonical form and its kind: the same over HTTP,
// over Kafka and from a query's answer, whatever the whitespace or key order of the body the
// channel sent; another kind, owner or amount under the same key is a key reused.
func (r Report) Fingerprint() string {
	return idempotent.Fingerprint(http.MethodPost, Routes[r.Kind], r.Body())
}

// OwnerID is r's OutNo as an order or recharge id, when it is one.
func (r Report) OwnerID() (int64, bool) { return ids.Parse(r.OutNo) }

// The claims: which order, recharge or refund a channel number belongs to (I13).

// Claim is a row of report_claims: the owner of one channel number, set by the first report
// that applied (or was kept as an anomaly) under it, and never purged. It is the fence that
// makes one trade number pay one order or credit one recharge, never both, and one refund
// number end one refund — with every dedup record gone too (I13), since the record only
// remembers a key, and the claim what the number belongs to.
type Claim struct {
	Channel string
	// Space is "trade" (trades and recharges share the channel's trade numbers) or "refund".
	Space string
	// ChannelNo is the channel's number: a trade_no or a refund_no.
	ChannelNo string
	// OwnerKind and OwnerNo name the owner: the kind of report that claimed the number and
	// the order, recharge or refund it named (its out_trade_no or out_refund_no).
	OwnerKind Kind
	OwnerNo   string
	CreatedAt time.Time
}

// TableName is the table of Claim.
func (Claim) TableName() string { return "report_claims" }

// ErrTradeConflict is anomaly.ErrTradeConflict: a number that belongs to another owner.
var ErrTradeConflict = anomaly.ErrTradeConflict

// claim makes r's owner the owner of r's number, in tx, the guard's transaction of r: the
// first report that ends something under a number claims it (and a rollback un-claims it);
// a later one naming the same owner passes; one naming another owner is refused as a
// trade_conflict, with its anomaly.
func claim(ctx context.Context, tx *gorm.DB, r Report) error {
	c := Claim{Channel: r.Channel, Space: r.space(), ChannelNo: r.Number, OwnerKind: r.Kind, OwnerNo: r.OutNo, CreatedAt: clock.Now()}
	res := tx.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&c)
	if res.Error != nil || res.RowsAffected == 1 {
		return res.Error
	}
	// A current read: under REPEATABLE READ a plain SELECT could answer from a snapshot older
	// than the claim that just refused the insert.
	owner, found, err := claimOf(ctx, database.ForUpdate(tx), r)
	switch {
	case err != nil:
		return err
	case !found:
		return errors.New("report_claims: the claim that refused the insert cannot be read")
	case owner.owns(r):
		return nil
	}
	return Refuse(ErrTradeConflict.Withf("%s", conflictDetail(r, owner)), conflictAnomaly(r, owner))
}

// claimOf returns the claim of r's number, if there is one.
func claimOf(ctx context.Context, db *gorm.DB, r Report) (Claim, bool, error) {
	var rows []Claim
	err := db.WithContext(ctx).Where("channel = ? AND space = ? AND channel_no = ?", r.Channel, r.space(), r.Number).Limit(1).Find(&rows).Error
	if err != nil || len(rows) == 0 {
		return Claim{}, false, err
	}
	return rows[0], true, nil
}

// owns reports whether c's owner is the one r names.
func (c Claim) owns(r Report) bool { return c.OwnerKind == r.Kind && c.OwnerNo == r.OutNo }

// ownerName names a claim's owner for a person: "order 123", "recharge 456", "refund RF789".
func ownerName(k Kind, outNo string) string {
	switch k {
	case Trade:
		return "order " + outNo
	case Recharge:
		return "recharge " + outNo
	}
	return "refund " + outNo
}

func conflictDetail(r Report, owner Claim) string {
	number, _ := r.fieldNames()
	return fmt.Sprintf("%s %s %s belongs to %s; this %s report names %s", r.Channel, number, r.Number,
		ownerName(owner.OwnerKind, owner.OwnerNo), r.Kind, ownerName(r.Kind, r.OutNo))
}

// conflictAnomaly is the trade_conflict anomaly of r, whose number belongs to owner: once per
// channel + number, however many copies arrive. It names the order or recharge r asked for.
func conflictAnomaly(r Report, owner Claim) *anomaly.Anomaly {
	a := &anomaly.Anomaly{Kind: anomaly.TradeConflict, Channel: r.Channel, Space: r.space(), TradeNo: r.Number, Amount: r.Amount, Detail: conflictDetail(r, owner)}
	if id, ok := r.OwnerID(); ok {
		switch r.Kind {
		case Trade:
			a.OrderID = &id
		case Recharge:
			a.RechargeID = &id
		}
	}
	return a
}
