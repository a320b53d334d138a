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
// A notification reads in http.go (or kafka.go) → port.go → claims.go → the domain's Apply.
package notify

import (
	"encoding/json"
	"net/http"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/web"
)

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
// or CLOSED for a refund. Only such a report claims its number (claims.go).
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
