package channelsim

import (
	"encoding/json"
	"fmt"
	"time"
)

// Trade statuses, as the channel API names them.
const (
	TradeWaitBuyerPay = "WAIT_BUYER_PAY"
	TradeSuccess      = "SUCCESS"
	TradeClosed       = "CLOSED"
)

// Refund statuses, as the channel API names them.
const (
	RefundProcessing = "PROCESSING"
	RefundSuccess    = "SUCCESS"
)

// Notification delivery statuses, as GET /sim/state shows them.
const (
	NotificationPending   = "PENDING"   // not yet acknowledged; another attempt is scheduled
	NotificationDelivered = "DELIVERED" // an answer was 200 {"result":"success"}
	NotificationGaveUp    = "GAVE_UP"   // the schedule ran out without an acknowledgement
)

// Notification kinds.
const (
	KindTrade    = "trade"
	KindRecharge = "recharge"
	KindRefund   = "refund"
)

// TradeRequest is the body of POST /channel/v1/trades.
type TradeRequest struct {
	OutTradeNo string     `json:"out_trade_no"`
	Amount     int64      `json:"amount"`
	Subject    string     `json:"subject"`
	NotifyURL  string     `json:"notify_url"`
	ExpiresAt  *time.Time `json:"expires_at"`
}

// Trade is a trade as the channel API answers it (create, query, close and the bill).
// PaidAt is null until the buyer paid.
type Trade struct {
	TradeNo    string     `json:"trade_no"`
	OutTradeNo string     `json:"out_trade_no"`
	Status     string     `json:"status"`
	Amount     int64      `json:"amount"`
	PayURL     string     `json:"pay_url"`
	PaidAt     *time.Time `json:"paid_at"`
}

// TradeRecord is everything the simulator keeps about a trade: the wire fields plus what the
// merchant sent and when the trade changed. GET /sim/state and the state file show it.
type TradeRecord struct {
	Trade
	// Kind is the kind of its notification: KindTrade for a merchant's trade, KindRecharge for
	// a recharge the buyer made at the channel (Sim.Recharge); "" in a saved state is a trade.
	Kind      string     `json:"kind,omitempty"`
	Subject   string     `json:"subject"`
	NotifyURL string     `json:"notify_url"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	ClosedAt  *time.Time `json:"closed_at,omitempty"`
}

// kind is the kind of the trade's notification.
func (t *TradeRecord) kind() string {
	if t.Kind == "" {
		return KindTrade
	}
	return t.Kind
}

// RefundRequest is the body of POST /channel/v1/refunds.
type RefundRequest struct {
	OutRefundNo string `json:"out_refund_no"`
	// OutTradeNo or TradeNo names the trade refunded, exactly one of them: the merchant's
	// number, or the channel's own (Alipay and WeChat refund by either).
	OutTradeNo string `json:"out_trade_no,omitempty"`
	TradeNo    string `json:"trade_no,omitempty"`
	Amount     int64  `json:"amount"`
	NotifyURL  string `json:"notify_url"`
}

// Refund is a refund as the channel API answers it. RefundedAt is null while it is
// PROCESSING.
type Refund struct {
	RefundNo    string     `json:"refund_no"`
	OutRefundNo string     `json:"out_refund_no"`
	OutTradeNo  string     `json:"out_trade_no"`
	Status      string     `json:"status"`
	Amount      int64      `json:"amount"`
	RefundedAt  *time.Time `json:"refunded_at"`
}

// RefundRecord is everything the simulator keeps about a refund.
type RefundRecord struct {
	Refund
	NotifyURL string    `json:"notify_url,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// Bill is the answer of GET /channel/v1/bills: the trades paid and the refunds completed on
// one UTC day.
type Bill struct {
	Date    string   `json:"date"`
	Trades  []Trade  `json:"trades"`
	Refunds []Refund `json:"refunds"`
}

// TradeNotification is the body the simulator posts to a trade's notify_url once it is paid.
type TradeNotification struct {
	Channel    string `json:"channel"`
	TradeNo    string `json:"trade_no"`
	OutTradeNo string `json:"out_trade_no"`
	Amount     int64  `json:"amount"`
	Status     string `json:"status"`
}

// RefundNotification is the body the simulator posts to a refund's notify_url once it
// succeeded.
type RefundNotification struct {
	Channel     string `json:"channel"`
	RefundNo    string `json:"refund_no"`
	OutRefundNo string `json:"out_refund_no"`
	Amount      int64  `json:"amount"`
	Status      string `json:"status"`
}

// Notification is one notification the simulator delivers, with every attempt so far. Body is
// the exact signed body; it is the same on every attempt.
type Notification struct {
	ID          string                `json:"id"`
	Kind        string                `json:"kind"`
	OutTradeNo  string                `json:"out_trade_no"`
	OutRefundNo string                `json:"out_refund_no,omitempty"`
	URL         string                `json:"url"`
	Body        json.RawMessage       `json:"body"`
	Status      string                `json:"status"`
	Rounds      int                   `json:"rounds"`
	NextAt      *time.Time            `json:"next_at,omitempty"`
	CreatedAt   time.Time             `json:"created_at"`
	Attempts    []NotificationAttempt `json:"attempts"`
}

// NotificationAttempt is one copy of a notification sent (or dropped) and its answer. Round 0
// is the immediate attempt, round i the retry after Schedule[i-1]; Copy > 0 marks the extra
// copies of a duplicate_notifications fault.
type NotificationAttempt struct {
	Round   int       `json:"round"`
	Copy    int       `json:"copy"`
	At      time.Time `json:"at"`
	Dropped bool      `json:"dropped,omitempty"`
	Status  int       `json:"status,omitempty"`
	Answer  string    `json:"answer,omitempty"`
	Error   string    `json:"error,omitempty"`
	Success bool      `json:"success"`
}

// State is what GET /sim/state answers: the faults in force and every trade, refund and
// notification, oldest first.
type State struct {
	Channel       string         `json:"channel"`
	Faults        Faults         `json:"faults"`
	Trades        []TradeRecord  `json:"trades"`
	Refunds       []RefundRecord `json:"refunds"`
	Notifications []Notification `json:"notifications"`
}

// Faults are the network and channel misbehaviours the simulator injects. The zero value
// injects nothing.
type Faults struct {
	DropNotifications      float64  `json:"drop_notifications"`      // probability (0..1) that a notification copy is lost
	DuplicateNotifications int      `json:"duplicate_notifications"` // extra copies of every notification sent at once
	NotifyDelay            Duration `json:"notify_delay"`            // wait this long before every notification attempt
	TimeoutAfterApply      float64  `json:"timeout_after_apply"`     // probability that a write is applied but answered only after the caller gave up
	FailBeforeApply        float64  `json:"fail_before_apply"`       // probability that a write is answered 503 without being applied
}

// Limits of the faults that PUT /sim/faults accepts.
const (
	maxDuplicates  = 100
	maxNotifyDelay = time.Hour
)

// validate reports the first fault outside its range.
func (f Faults) validate() error {
	probabilities := []struct {
		name string
		p    float64
	}{
		{"drop_notifications", f.DropNotifications},
		{"timeout_after_apply", f.TimeoutAfterApply},
		{"fail_before_apply", f.FailBeforeApply},
	}
	for _, p := range probabilities {
		if !(p.p >= 0 && p.p <= 1) {
			return ErrInvalidRequest.withf("field %q must be a probability between 0 and 1", p.name)
		}
	}
	if f.DuplicateNotifications < 0 || f.DuplicateNotifications > maxDuplicates {
		return ErrInvalidRequest.withf("field %q must be between 0 and %d", "duplicate_notifications", maxDuplicates)
	}
	if f.NotifyDelay < 0 || time.Duration(f.NotifyDelay) > maxNotifyDelay {
		return ErrInvalidRequest.withf("field %q must be between 0s and %s", "notify_delay", maxNotifyDelay)
	}
	return nil
}

// clamped returns f with every value forced into its range, for SetFaults, which cannot
// refuse.
func (f Faults) clamped() Faults {
	f.DropNotifications = clamp01(f.DropNotifications)
	f.TimeoutAfterApply = clamp01(f.TimeoutAfterApply)
	f.FailBeforeApply = clamp01(f.FailBeforeApply)
	f.DuplicateNotifications = min(max(f.DuplicateNotifications, 0), maxDuplicates)
	f.NotifyDelay = Duration(min(max(time.Duration(f.NotifyDelay), 0), maxNotifyDelay))
	return f
}

// clamp01 forces p into 0..1; NaN becomes 0.
func clamp01(p float64) float64 {
	if !(p > 0) {
		return 0
	}
	return min(p, 1)
}

// Duration is a time.Duration that reads and writes JSON as a Go duration string ("2s").
type Duration time.Duration

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration string; "" and null are zero.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration must be a string such as \"2s\"")
	}
	if s == "" {
		*d = 0
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q", s)
	}
	*d = Duration(v)
	return nil
}
