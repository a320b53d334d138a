package explain

import "time"

// The rows an explanation reads, one struct per table, as the admin API shows them. Ids are
// JSON strings, like everywhere in the API. They are this package's own read models: each
// domain keeps its write model, and a column added there is shown here only when added here.

// OrderRow is a row of orders.
type OrderRow struct {
	ID        int64      `json:"order_id,string"`
	UserID    int64      `json:"user_id,string"`
	Status    string     `json:"status"`
	Amount    int64      `json:"amount"`
	Currency  string     `json:"currency"`
	Channel   *string    `json:"channel"`
	TradeNo   *string    `json:"trade_no"`
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt time.Time  `json:"updated_at"`
	ExpiresAt time.Time  `json:"expires_at"`
	PaidAt    *time.Time `json:"paid_at"`
}

// RechargeRow is a row of recharges.
type RechargeRow struct {
	ID          int64      `json:"recharge_id,string"`
	UserID      int64      `json:"user_id,string"`
	Amount      int64      `json:"amount"`
	Status      string     `json:"status"`
	Channel     *string    `json:"channel"`
	TradeNo     *string    `json:"trade_no"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	SucceededAt *time.Time `json:"succeeded_at"`
}

// MovementRow is a row of inventory_movements: a stock movement of the order.
type MovementRow struct {
	ID        int64     `json:"movement_id,string"`
	SKU       string    `json:"sku"`
	Kind      string    `json:"kind"`
	Quantity  int64     `json:"quantity"`
	CreatedAt time.Time `json:"created_at"`
}

// TradeRow is a row of trades: the order's trade at its channel.
type TradeRow struct {
	OrderID    int64     `json:"order_id,string"`
	Channel    string    `json:"channel"`
	OutTradeNo string    `json:"out_trade_no"`
	TradeNo    *string   `json:"trade_no"`
	Amount     int64     `json:"amount"`
	Status     string    `json:"status"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// PaymentRow is a row of payments: a payment a channel reported and oncepay applied.
type PaymentRow struct {
	ID        int64     `json:"payment_id,string"`
	Channel   string    `json:"channel"`
	TradeNo   string    `json:"trade_no"`
	OrderID   int64     `json:"order_id,string"`
	Amount    int64     `json:"amount"`
	Status    string    `json:"status"`
	RequestID string    `json:"request_id"`
	CreatedAt time.Time `json:"created_at"`
}

// RefundRow is a row of refunds.
type RefundRow struct {
	ID            int64     `json:"refund_id,string"`
	OrderID       *int64    `json:"order_id,omitempty"`
	RechargeID    *int64    `json:"recharge_id,omitempty"`
	AnomalyID     *int64    `json:"anomaly_id,omitempty"`
	Channel       string    `json:"channel"`
	OutTradeNo    string    `json:"out_trade_no"`
	TradeNo       *string   `json:"trade_no"`
	OutRefundNo   string    `json:"out_refund_no"`
	RefundNo      *string   `json:"refund_no"`
	Amount        int64     `json:"amount"`
	Reason        string    `json:"reason"`
	Status        string    `json:"status"`
	ChannelStatus *string   `json:"channel_status"`
	Attempts      int       `json:"attempts"`
	LastError     *string   `json:"last_error"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
}

// AnomalyRow is a row of anomalies: a payment kept apart, or a line of the channel's bill
// that disagreed with oncepay (kind reconcile_*). The bill itself is the channel's and is not
// stored: a bill line that matched leaves no row.
type AnomalyRow struct {
	ID         int64     `json:"anomaly_id,string"`
	Kind       string    `json:"kind"`
	OrderID    *int64    `json:"order_id,omitempty"`
	RechargeID *int64    `json:"recharge_id,omitempty"`
	Channel    string    `json:"channel"`
	Space      string    `json:"space"`
	TradeNo    string    `json:"trade_no"`
	Amount     int64     `json:"amount"`
	Detail     string    `json:"detail"`
	RequestID  string    `json:"request_id"`
	CreatedAt  time.Time `json:"created_at"`
}

// ClaimRow is a row of report_claims: the channel number a report applied under, and whose
// it is forever after.
type ClaimRow struct {
	Channel   string    `json:"channel"`
	Space     string    `json:"space"`
	ChannelNo string    `json:"channel_no"`
	OwnerKind string    `json:"owner_kind"`
	OwnerNo   string    `json:"owner_no"`
	CreatedAt time.Time `json:"created_at"`
}

// OutboxRow is a row of outbox: a message for Kafka, written with the change.
type OutboxRow struct {
	ID          int64      `json:"message_id,string"`
	Topic       string     `json:"topic"`
	MsgKey      string     `json:"msg_key"`
	Type        string     `json:"type,omitempty" gorm:"-"`
	Payload     []byte     `json:"-"`
	RequestID   string     `json:"request_id"`
	Attempts    int        `json:"attempts"`
	CreatedAt   time.Time  `json:"created_at"`
	PublishedAt *time.Time `json:"published_at"`
}

// EventRow is a row of events: a change as the merchant hears of it. Its payload, the body
// of every delivery, is not shown (GET /v1/admin/events shows it).
type EventRow struct {
	ID        int64      `json:"event_id,string"`
	Type      string     `json:"type"`
	RequestID string     `json:"request_id"`
	Seq       *int64     `json:"seq"`
	CreatedAt time.Time  `json:"created_at"`
	Delivery  []Delivery `json:"deliveries" gorm:"-"`
}

// Delivery is a row of webhook_deliveries with its attempts from webhook_attempts.
type Delivery struct {
	ID            int64      `json:"delivery_id,string"`
	EndpointID    int64      `json:"endpoint_id,string"`
	EventID       int64      `json:"event_id,string"`
	Status        string     `json:"status"`
	Attempts      int        `json:"attempts"`
	NextAttemptAt time.Time  `json:"next_attempt_at"`
	LockedUntil   *time.Time `json:"locked_until"`
	LockedBy      *string    `json:"locked_by"`
	CreatedAt     time.Time  `json:"created_at"`
	UpdatedAt     time.Time  `json:"updated_at"`
	Sent          []Attempt  `json:"sent" gorm:"-"`
}

// Attempt is a row of webhook_attempts: one delivery attempt sent, and what came back.
type Attempt struct {
	ID         int64     `json:"attempt_id,string"`
	DeliveryID int64     `json:"delivery_id,string"`
	EventID    int64     `json:"event_id,string"`
	Attempt    int       `json:"attempt"`
	SentAt     time.Time `json:"sent_at"`
	StatusCode int       `json:"status_code"`
	LatencyMS  int64     `json:"latency_ms"`
	Error      *string   `json:"error"`
}
