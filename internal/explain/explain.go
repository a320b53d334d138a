// Package explain answers an operator's question "what happened to this write?" with one view
// of it across the whole chain: from an Idempotency-Key, an order id, a channel's trade number
// or a refund's out_refund_no, it finds the order (or the recharge) the write was about and
// reads every layer's rows of it — the key's token, attempts, lease and dedup records; the
// order, its stock movements and its state changes; the outbox messages; the merchant's
// events and their webhook deliveries; the channel's trade, payments, refunds, claims and
// anomalies (the bill lines that disagreed); and the ledger's transfers — as sections and as
// one timeline sorted by time.
//
// It reads across domains, so it lives beside them rather than in one of them, and it only
// reads: a handful of queries whatever the size of the history, each section cut at a limit
// that the answer names when it bites.
package explain

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
	"github.com/oncepay/oncepay/idempotent/idemops"
	idem "github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/ids"
)

// tokenPrefix marks a key that is a one-time token issued by POST /v1/idempotency-tokens
// (the kit's prefix, which the contract publishes).
const tokenPrefix = "tok_"

// DefaultLimit is the most rows a section of an explanation holds.
const DefaultLimit = 50

// window widens the time range an explanation searches by id or time around the subject's
// own times: rows are stamped by the clocks of several instances, which may disagree a little.
const window = time.Minute

// The layers of the timeline.
const (
	LayerIdempotency = "idempotency"
	LayerOrder       = "order"
	LayerRecharge    = "recharge"
	LayerOutbox      = "outbox"
	LayerWebhook     = "webhook"
	LayerChannel     = "channel"
	LayerLedger      = "ledger"
)

// The biz types of the channel's reports' dedup records (internal/notify's keys).
const (
	bizTypeTradeReport  = "channel.trade"
	bizTypeRefundReport = "channel.refund"
)

// Handle is what the operator starts from: exactly one of a client's Idempotency-Key (with its
// user), an order id, a channel's trade number (optionally with its channel) or a refund's
// out_refund_no.
type Handle struct {
	// Kind is "key", "order", "trade" or "refund".
	Kind  string `json:"kind"`
	Value string `json:"value"`
	// UserID is the user of a key; Channel narrows a trade number to one channel.
	UserID  string `json:"user_id,omitempty"`
	Channel string `json:"channel,omitempty"`
}

// Subject is what the handle resolved to: an order or a recharge, or nothing when the handle
// is a key whose write made neither (a stored refusal, a key still in flight).
type Subject struct {
	Kind string `json:"kind,omitempty"`
	ID   string `json:"id,omitempty"`
}

// Explanation is the answer: the handle, its subject, one timeline and each layer's section.
type Explanation struct {
	Handle  Handle  `json:"handle"`
	Subject Subject `json:"subject"`
	// Limit is the most rows a section holds; Truncated names the sections that had more.
	Limit     int      `json:"limit"`
	Truncated []string `json:"truncated"`
	// Timeline is every row below that has a time, oldest first.
	Timeline    []Entry      `json:"timeline"`
	Idempotency Idempotency  `json:"idempotency"`
	Order       *OrderPart   `json:"order,omitempty"`
	Recharge    *RechargeRow `json:"recharge,omitempty"`
	Outbox      []OutboxRow  `json:"outbox"`
	Events      []EventRow   `json:"events"`
	Channel     ChannelPart  `json:"channel"`
	Ledger      LedgerPart   `json:"ledger"`
}

// Entry is one line of the timeline: when, which layer, what happened and the ids of its row.
type Entry struct {
	At    time.Time         `json:"at"`
	Layer string            `json:"layer"`
	What  string            `json:"what"`
	IDs   map[string]string `json:"ids"`
}

// Idempotency is the idempotency layer's view: the dedup records of the subject's writes
// (the clients' keys and the channel's reports), each with its attempt log and lease, and the
// token when the key the operator gave is one.
type Idempotency struct {
	Records []Record       `json:"records"`
	Token   *idemops.Token `json:"token,omitempty"`
}

// Record is a dedup record as the admin lookup shows it, with the lease on its key.
type Record struct {
	idem.RecordView
	// LeaseHeld says whether an attempt holds the key's lease now.
	LeaseHeld bool `json:"lease_held"`
}

// OrderPart is the order's own rows and its state changes.
type OrderPart struct {
	OrderRow
	Movements []MovementRow `json:"movements"`
	// Transitions are the order's state changes as its events name them (order.created →
	// PENDING_PAYMENT, order.paid → PAID, …): the outbox message written in each change's
	// transaction is the record of that transition.
	Transitions []Transition `json:"transitions"`
}

// Transition is one state change of the order.
type Transition struct {
	At        time.Time `json:"at"`
	To        string    `json:"to"`
	Event     string    `json:"event"`
	MessageID string    `json:"message_id"`
	RequestID string    `json:"request_id"`
}

// ChannelPart is the channel's side: the trade, the payments it reported, the refunds, the
// numbers claimed by reports and the anomalies, including reconciliation's bill lines.
type ChannelPart struct {
	Trades    []TradeRow   `json:"trades"`
	Payments  []PaymentRow `json:"payments"`
	Refunds   []RefundRow  `json:"refunds"`
	Claims    []ClaimRow   `json:"claims"`
	Anomalies []AnomalyRow `json:"anomalies"`
}

// LedgerPart is the books' side: the transfers the subject's facts wrote.
type LedgerPart struct {
	Transfers []ledger.TransferView `json:"transfers"`
}

// Explainer reads explanations.
type Explainer struct {
	db       *gorm.DB
	guard    *idempotent.Guard
	channels []string
	limit    int
}

// New returns an explainer on db and guard. channels are the configured channels' names: a
// trade number given without its channel is looked for in each of them, by index.
func New(db *gorm.DB, guard *idempotent.Guard, channels []string) *Explainer {
	return &Explainer{db: db, guard: guard, channels: channels, limit: DefaultLimit}
}

// errUnknown is a handle that names nothing oncepay knows.
func errUnknown(h Handle) error {
	return apperr.ErrNotFound.Withf("no write is known by %s=%s", h.Kind, h.Value)
}

// Explain resolves h and reads every layer of its subject.
func (e *Explainer) Explain(ctx context.Context, h Handle) (*Explanation, error) {
	x := &Explanation{Handle: h, Limit: e.limit, Truncated: []string{}, Timeline: []Entry{},
		Idempotency: Idempotency{Records: []Record{}}, Outbox: []OutboxRow{}, Events: []EventRow{}}
	c := &collector{e: e, ctx: ctx, db: e.db.WithContext(ctx), x: x}
	if err := c.resolve(h); err != nil {
		return nil, err
	}
	switch x.Subject.Kind {
	case LayerOrder:
		c.order()
	case LayerRecharge:
		c.recharge()
	}
	c.records()
	if c.err != nil {
		return nil, c.err
	}
	c.timeline()
	return x, nil
}

// collector gathers one explanation; its first error ends the gathering.
type collector struct {
	e   *Explainer
	ctx context.Context
	db  *gorm.DB
	x   *Explanation
	err error

	// key is the record the handle named, when it is a key.
	key *idempotent.Key
	// from and to bound the subject's history in time, window included.
	from, to time.Time
	// userID is the subject's user, whose keys are searched.
	userID int64
	// requestIDs are the request ids of the subject's rows: the records of the same requests.
	requestIDs []string
	// tradeNos and refundNos are the channel numbers of the subject, by channel.
	tradeNos, refundNos []channelNo
}

// channelNo is a channel's number: a trade_no or a refund_no.
type channelNo struct{ channel, no string }

// find runs q into dst, limited to the explanation's limit, and names section as truncated
// when there was more.
func find[T any](c *collector, section string, q *gorm.DB, dst *[]T) {
	if c.err != nil {
		return
	}
	var rows []T
	if err := q.Limit(c.e.limit + 1).Find(&rows).Error; err != nil {
		c.err = fmt.Errorf("explain %s: %w", section, err)
		return
	}
	if len(rows) > c.e.limit {
		rows = rows[:c.e.limit]
		c.x.Truncated = append(c.x.Truncated, section)
	}
	if rows == nil {
		rows = []T{}
	}
	*dst = rows
}

// resolve finds the subject of h.
func (c *collector) resolve(h Handle) error {
	switch h.Kind {
	case "order":
		id, _ := ids.Parse(h.Value)
		return c.subject(LayerOrder, id, h)
	case "refund":
		var r RefundRow
		err := c.db.Table("refunds").Where("out_refund_no = ?", h.Value).Take(&r).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return errUnknown(h)
		} else if err != nil {
			return err
		}
		if r.OrderID != nil {
			return c.subject(LayerOrder, *r.OrderID, h)
		}
		return c.subject(LayerRecharge, *r.RechargeID, h)
	case "trade":
		return c.resolveTrade(h)
	case "key":
		return c.resolveKey(h)
	}
	return apperr.ErrInvalidRequest.Withf("unknown handle %q", h.Kind)
}

// subject sets the subject, or answers errUnknown when no such row exists.
func (c *collector) subject(kind string, id int64, h Handle) error {
	table := map[string]string{LayerOrder: "orders", LayerRecharge: "recharges"}[kind]
	var n int64
	if err := c.db.Table(table).Where("id = ?", id).Count(&n).Error; err != nil {
		return err
	}
	if n == 0 {
		return errUnknown(h)
	}
	c.x.Subject = Subject{Kind: kind, ID: ids.Format(id)}
	return nil
}

// channels are the channels a trade number is looked for in.
func (c *collector) channels(h Handle) []string {
	if h.Channel != "" {
		return []string{h.Channel}
	}
	return c.e.channels
}

// resolveTrade finds the owner of a trade number: the claim a report made of it (orders and
// recharges share the channel's trade numbers), else the recharge or the order's trade that
// carries it before any report applied.
func (c *collector) resolveTrade(h Handle) error {
	chs := c.channels(h)
	var claims []ClaimRow
	if err := c.db.Table("report_claims").Where("channel IN ? AND space = 'trade' AND channel_no = ?", chs, h.Value).
		Limit(2).Find(&claims).Error; err != nil {
		return err
	}
	owners := map[Subject]bool{}
	for _, cl := range claims {
		kind := LayerOrder
		if cl.OwnerKind == "recharge" {
			kind = LayerRecharge
		}
		owners[Subject{Kind: kind, ID: cl.OwnerNo}] = true
	}
	if len(owners) == 0 {
		var rc []RechargeRow
		if err := c.db.Table("recharges").Where("channel IN ? AND trade_no = ?", chs, h.Value).Limit(2).Find(&rc).Error; err != nil {
			return err
		}
		for _, r := range rc {
			owners[Subject{Kind: LayerRecharge, ID: ids.Format(r.ID)}] = true
		}
	}
	if len(owners) == 0 {
		// A trade no report has paid yet: trades has no index on the channel's number, and is
		// scanned — an operator's rare question, one row per order.
		var ts []TradeRow
		if err := c.db.Table("trades").Where("channel IN ? AND trade_no = ?", chs, h.Value).Limit(2).Find(&ts).Error; err != nil {
			return err
		}
		for _, t := range ts {
			owners[Subject{Kind: LayerOrder, ID: ids.Format(t.OrderID)}] = true
		}
	}
	switch len(owners) {
	case 0:
		return errUnknown(h)
	case 1:
		for s := range owners {
			id, ok := ids.Parse(s.ID)
			if !ok {
				return errUnknown(h)
			}
			return c.subject(s.Kind, id, h)
		}
	}
	return apperr.ErrInvalidRequest.Withf("trade=%s names trades of several channels: add channel=", h.Value)
}

// resolveKey finds a client's key — its committed record, or its lease while its first
// attempt runs — and the order or recharge its stored answer names.
func (c *collector) resolveKey(h Handle) error {
	k := idempotent.Key{Scope: "user:" + h.UserID, BizType: httpkey.BizType, BizKey: h.Value}
	c.key = &k
	rec, found, err := c.e.guard.Lookup(c.ctx, k)
	if err != nil {
		return err
	}
	if !found {
		held, _, err := idemops.InFlight(c.ctx, c.e.guard, k)
		if err != nil {
			slog.WarnContext(c.ctx, "explain: the lease is unreadable", "err", err)
		}
		if !held {
			return errUnknown(h)
		}
		return nil
	}
	var named struct {
		OrderID    string `json:"order_id"`
		RechargeID string `json:"recharge_id"`
	}
	if rec.ResponseStatus < 300 && json.Unmarshal(rec.ResponseBody, &named) == nil {
		if id, ok := ids.Parse(named.OrderID); ok {
			return c.subject(LayerOrder, id, h)
		}
		if id, ok := ids.Parse(named.RechargeID); ok {
			return c.subject(LayerRecharge, id, h)
		}
	}
	return nil
}

// span widens [from, to] to hold t.
func (c *collector) span(ts ...time.Time) {
	for _, t := range ts {
		if t.IsZero() {
			continue
		}
		if c.from.IsZero() || t.Before(c.from) {
			c.from = t
		}
		if t.After(c.to) {
			c.to = t
		}
	}
}

// idRange is the range of snowflake ids made within the subject's history.
func (c *collector) idRange() (int64, int64) {
	return ids.Floor(c.from.Add(-window)), ids.Floor(c.to.Add(window))
}

// order reads every layer of the order.
func (c *collector) order() {
	id, _ := ids.Parse(c.x.Subject.ID)
	p := &OrderPart{Movements: []MovementRow{}, Transitions: []Transition{}}
	if err := c.db.Table("orders").Where("id = ?", id).Take(&p.OrderRow).Error; err != nil {
		c.err = err
		return
	}
	c.x.Order = p
	c.userID = p.UserID
	c.span(p.CreatedAt, p.UpdatedAt)
	ch := &c.x.Channel
	find(c, "order.movements", c.db.Table("inventory_movements").Where("order_id = ?", id).Order("created_at, id"), &p.Movements)
	find(c, "channel.trades", c.db.Table("trades").Where("order_id = ?", id), &ch.Trades)
	find(c, "channel.payments", c.db.Table("payments").Where("order_id = ?", id).Order("created_at, id"), &ch.Payments)
	find(c, "channel.refunds", c.db.Table("refunds").Where("order_id = ?", id).Order("created_at, id"), &ch.Refunds)
	if c.err != nil {
		return
	}
	for _, t := range ch.Trades {
		c.span(t.UpdatedAt)
		if t.TradeNo != nil {
			c.tradeNos = append(c.tradeNos, channelNo{t.Channel, *t.TradeNo})
		}
	}
	for _, py := range ch.Payments {
		c.span(py.CreatedAt)
		c.tradeNos = append(c.tradeNos, channelNo{py.Channel, py.TradeNo})
		c.requestIDs = append(c.requestIDs, py.RequestID)
	}
	c.refunds()
	c.anomalies("order_id", id)
	c.messages(ids.Format(id), `"order_id":"`+ids.Format(id)+`"`)
	c.claims()
	c.books()
	for _, m := range c.x.Outbox {
		if to, ok := orderStatusOf[m.Type]; ok {
			p.Transitions = append(p.Transitions, Transition{At: m.CreatedAt, To: to, Event: m.Type,
				MessageID: ids.Format(m.ID), RequestID: m.RequestID})
		}
	}
}

// orderStatusOf is the status each order event announces (internal/outbox's event types).
var orderStatusOf = map[string]string{
	"order.created":   "PENDING_PAYMENT",
	"order.paid":      "PAID",
	"order.cancelled": "CANCELLED",
	"order.closed":    "CLOSED",
	"order.refunded":  "REFUNDED",
}

// recharge reads every layer of the recharge.
func (c *collector) recharge() {
	id, _ := ids.Parse(c.x.Subject.ID)
	var r RechargeRow
	if err := c.db.Table("recharges").Where("id = ?", id).Take(&r).Error; err != nil {
		c.err = err
		return
	}
	c.x.Recharge = &r
	c.userID = r.UserID
	c.span(r.CreatedAt, r.UpdatedAt)
	if r.Channel != nil && r.TradeNo != nil {
		c.tradeNos = append(c.tradeNos, channelNo{*r.Channel, *r.TradeNo})
	}
	find(c, "channel.refunds", c.db.Table("refunds").Where("recharge_id = ? AND created_at >= ?", id, c.from.Add(-window)).
		Order("created_at, id"), &c.x.Channel.Refunds)
	c.refunds()
	c.anomalies("recharge_id", id)
	c.messages("", `"recharge_id":"`+ids.Format(id)+`"`)
	c.claims()
	c.books()
}

// refunds notes the refunds' numbers and times.
func (c *collector) refunds() {
	for _, r := range c.x.Channel.Refunds {
		c.span(r.UpdatedAt)
		if r.RefundNo != nil {
			c.refundNos = append(c.refundNos, channelNo{r.Channel, *r.RefundNo})
		}
		if r.TradeNo != nil && !slices.Contains(c.tradeNos, channelNo{r.Channel, *r.TradeNo}) {
			c.tradeNos = append(c.tradeNos, channelNo{r.Channel, *r.TradeNo})
		}
	}
}

// anomalies reads the anomalies of the subject (column = id) and of its channel numbers, since
// its creation: the payments kept apart and reconciliation's disagreeing bill lines, which
// may come days later.
func (c *collector) anomalies(column string, id int64) {
	q := c.db.Table("anomalies").Where("created_at >= ?", c.from.Add(-window))
	cond := c.db.Where(column+" = ?", id)
	for _, n := range c.tradeNos {
		cond = cond.Or("channel = ? AND space = 'trade' AND trade_no = ?", n.channel, n.no)
	}
	for _, n := range c.refundNos {
		cond = cond.Or("channel = ? AND space = 'refund' AND trade_no = ?", n.channel, n.no)
	}
	find(c, "channel.anomalies", q.Where(cond).Order("created_at, id"), &c.x.Channel.Anomalies)
	for _, a := range c.x.Channel.Anomalies {
		c.requestIDs = append(c.requestIDs, a.RequestID)
		if a.Space == "trade" && !slices.Contains(c.tradeNos, channelNo{a.Channel, a.TradeNo}) {
			c.tradeNos = append(c.tradeNos, channelNo{a.Channel, a.TradeNo})
		}
	}
}

// messages reads the outbox messages keyed by msgKey (none for "") and the merchant's events
// that share their ids or whose payload names the subject (payloadMark), within the subject's
// history by id, then the events' deliveries and their attempts: four queries.
func (c *collector) messages(msgKey, payloadMark string) {
	lo, hi := c.idRange()
	if msgKey != "" {
		find(c, "outbox", c.db.Table("outbox").Where("id BETWEEN ? AND ? AND msg_key = ?", lo, hi, msgKey).Order("id"), &c.x.Outbox)
	}
	msgIDs := []int64{0}
	for i, m := range c.x.Outbox {
		var p struct{ Type string }
		if json.Unmarshal(m.Payload, &p) == nil {
			c.x.Outbox[i].Type = p.Type
		}
		msgIDs = append(msgIDs, m.ID)
		c.requestIDs = append(c.requestIDs, m.RequestID)
	}
	find(c, "events", c.db.Table("events").Select("id, type, request_id, seq, created_at").
		Where("id BETWEEN ? AND ?", lo, hi).
		Where(c.db.Where("id IN ?", msgIDs).Or("INSTR(payload, ?) > 0", payloadMark)).Order("id"), &c.x.Events)
	if c.err != nil || len(c.x.Events) == 0 {
		return
	}
	evIDs := make([]int64, len(c.x.Events))
	for i, ev := range c.x.Events {
		evIDs[i] = ev.ID
		c.requestIDs = append(c.requestIDs, ev.RequestID)
	}
	var deliveries []Delivery
	find(c, "events.deliveries", c.db.Table("webhook_deliveries").Where("event_id IN ?", evIDs).Order("created_at, id"), &deliveries)
	var sent []Attempt
	find(c, "events.deliveries.sent", c.db.Table("webhook_attempts").
		Where("sent_at >= ? AND event_id IN ?", c.from.Add(-window), evIDs).Order("sent_at, id"), &sent)
	bySent := map[int64][]Attempt{}
	for _, a := range sent {
		bySent[a.DeliveryID] = append(bySent[a.DeliveryID], a)
	}
	byEvent := map[int64][]Delivery{}
	for _, d := range deliveries {
		d.Sent = bySent[d.ID]
		if d.Sent == nil {
			d.Sent = []Attempt{}
		}
		byEvent[d.EventID] = append(byEvent[d.EventID], d)
	}
	for i, ev := range c.x.Events {
		c.x.Events[i].Delivery = byEvent[ev.ID]
		if c.x.Events[i].Delivery == nil {
			c.x.Events[i].Delivery = []Delivery{}
		}
	}
}

// claims reads the report claims of the subject's channel numbers, by primary key.
func (c *collector) claims() {
	c.x.Channel.Claims = []ClaimRow{}
	if len(c.tradeNos)+len(c.refundNos) == 0 {
		return
	}
	cond := c.db.Where("1 = 0")
	for _, n := range c.tradeNos {
		cond = cond.Or("channel = ? AND space = 'trade' AND channel_no = ?", n.channel, n.no)
	}
	for _, n := range c.refundNos {
		cond = cond.Or("channel = ? AND space = 'refund' AND channel_no = ?", n.channel, n.no)
	}
	find(c, "channel.claims", c.db.Table("report_claims").Where(cond).Order("created_at"), &c.x.Channel.Claims)
}

// books reads the ledger's transfers of the subject's facts, by their derived ids: each trade
// the channel took, each refund with its end and its late posting.
func (c *collector) books() {
	var tids []string
	for _, n := range c.tradeNos {
		tids = append(tids, ledger.TradeID(n.channel, n.no))
	}
	for _, r := range c.x.Channel.Refunds {
		id := ledger.RefundID(r.Channel, r.OutRefundNo)
		tids = append(tids, id, id+":end", id+":late")
	}
	if c.err != nil {
		return
	}
	ts, err := ledger.FindAll(c.ctx, c.e.db, tids)
	if err != nil {
		c.err = fmt.Errorf("explain ledger: %w", err)
		return
	}
	c.x.Ledger.Transfers = ts
}

// records reads the dedup records of the subject's writes — the key the operator gave, the
// user's keys whose stored answer names the subject or whose request wrote one of its rows,
// and the channel's reports of its numbers — with each record's attempt log and lease.
func (c *collector) records() {
	if c.err != nil {
		return
	}
	var rows []idempotent.Record
	if c.x.Subject.Kind != "" {
		q := c.db.Table("idempotency_records").
			Where("scope = ? AND biz_type = ? AND created_at >= ?", "user:"+strconv.FormatInt(c.userID, 10), httpkey.BizType, c.from.Add(-window))
		mark := `"order_id":"` + c.x.Subject.ID + `"`
		if c.x.Subject.Kind == LayerRecharge {
			mark = `"recharge_id":"` + c.x.Subject.ID + `"`
		}
		cond := c.db.Where("INSTR(response_body, ?) > 0", mark)
		if len(c.requestIDs) > 0 {
			cond = cond.Or("request_id IN ?", c.requestIDs)
		}
		find(c, "idempotency.records", q.Where(cond).Order("created_at, id"), &rows)
		var reports []idempotent.Record
		if len(c.tradeNos)+len(c.refundNos) > 0 {
			rc := c.db.Where("1 = 0")
			for _, n := range c.tradeNos {
				final, after, before := reportScopes(n.channel)
				rc = rc.Or("biz_type = ? AND biz_key = ? AND (scope = ? OR (scope > ? AND scope < ?))", bizTypeTradeReport, n.no, final, after, before)
			}
			for _, n := range c.refundNos {
				final, after, before := reportScopes(n.channel)
				rc = rc.Or("biz_type = ? AND biz_key = ? AND (scope = ? OR (scope > ? AND scope < ?))", bizTypeRefundReport, n.no, final, after, before)
			}
			find(c, "idempotency.reports", c.db.Table("idempotency_records").Where(rc).Order("created_at, id"), &reports)
		}
		rows = append(rows, reports...)
	}
	if c.err != nil {
		return
	}
	keys := map[idempotent.Key]bool{}
	for _, r := range rows {
		k := idempotent.Key{Scope: r.Scope, BizType: r.BizType, BizKey: r.BizKey}
		if keys[k] {
			continue
		}
		keys[k] = true
		c.x.Idempotency.Records = append(c.x.Idempotency.Records, c.record(k, r, true))
	}
	if c.key != nil && !keys[*c.key] {
		rec, found, err := c.e.guard.Lookup(c.ctx, *c.key)
		if err != nil {
			c.err = err
			return
		}
		if !found {
			rec = idempotent.Record{Scope: c.key.Scope, BizType: c.key.BizType, BizKey: c.key.BizKey, Status: "PROCESSING"}
		}
		c.x.Idempotency.Records = append([]Record{c.record(*c.key, rec, found)}, c.x.Idempotency.Records...)
	}
	if c.key != nil && strings.HasPrefix(c.key.BizKey, tokenPrefix) {
		t, err := idemops.TokenOf(c.ctx, c.e.guard, c.key.BizKey)
		if err != nil {
			slog.WarnContext(c.ctx, "explain: the token is unreadable", "err", err)
		} else {
			c.x.Idempotency.Token = &t
		}
	}
}

// reportScopes are the bounds of the scopes of channel's reports: channel:<channel> for a final
// report, channel:<channel>#<status> for the others (notify.Report.Key) — the byte range just
// after "#" and before "$", so that the unique index's first column finds them by range.
func reportScopes(channel string) (final, after, before string) {
	base := "channel:" + channel
	return base, base + "#", base + "$"
}

// record is the view of rec, committed or not, with its key's attempt log and lease. Redis
// unreadable leaves them empty, with a warning: the database's rows are the answer.
func (c *collector) record(k idempotent.Key, rec idempotent.Record, committed bool) Record {
	v := Record{RecordView: idem.ViewOf(rec)}
	if !committed {
		v.CreatedAt, v.UpdatedAt, v.ExpiresAt = nil, nil, nil
	}
	attempts, err := idemops.Attempts(c.ctx, c.e.guard, k)
	if err != nil {
		slog.WarnContext(c.ctx, "explain: the attempt log is unreadable", "err", err)
	}
	v.Attempts = attempts
	if v.Attempts == nil {
		v.Attempts = []idemops.Attempt{}
	}
	held, ttl, err := idemops.InFlight(c.ctx, c.e.guard, k)
	if err != nil {
		slog.WarnContext(c.ctx, "explain: the lease is unreadable", "err", err)
	}
	v.LeaseHeld = held
	if held {
		v.LeaseRemainingMS = max(ttl.Milliseconds(), 1)
	}
	return v
}

// timeline lays every row with a time on one line, oldest first.
func (c *collector) timeline() {
	x := c.x
	add := func(at time.Time, layer, what string, kv ...string) {
		if at.IsZero() {
			return
		}
		e := Entry{At: at.UTC(), Layer: layer, What: what, IDs: map[string]string{}}
		for i := 0; i+1 < len(kv); i += 2 {
			e.IDs[kv[i]] = kv[i+1]
		}
		x.Timeline = append(x.Timeline, e)
	}
	for _, r := range x.Idempotency.Records {
		for _, a := range r.Attempts {
			add(a.At, LayerIdempotency, fmt.Sprintf("attempt via %s: %s at layer %s, status %d", a.Via, a.Outcome, a.Layer, a.Status),
				"scope", r.Scope, "biz_type", r.BizType, "biz_key", r.BizKey, "request_id", a.RequestID)
		}
		if r.CreatedAt != nil {
			add(*r.CreatedAt, LayerIdempotency, fmt.Sprintf("dedup record %s committed (%s, %d)", r.BizType, r.Outcome, r.ResponseStatus),
				"scope", r.Scope, "biz_type", r.BizType, "biz_key", r.BizKey, "request_id", r.RequestID)
		}
	}
	if o := x.Order; o != nil {
		oid := ids.Format(o.ID)
		add(o.CreatedAt, LayerOrder, "order created, "+ids.Format(o.Amount)+" "+o.Currency, "order_id", oid)
		for _, t := range o.Transitions {
			add(t.At, LayerOrder, "order → "+t.To, "order_id", oid, "message_id", t.MessageID, "request_id", t.RequestID)
		}
		for _, m := range o.Movements {
			add(m.CreatedAt, LayerOrder, fmt.Sprintf("stock %s %d × %s", m.Kind, m.Quantity, m.SKU), "order_id", oid, "movement_id", ids.Format(m.ID))
		}
	}
	if r := x.Recharge; r != nil {
		add(r.CreatedAt, LayerRecharge, "recharge created", "recharge_id", ids.Format(r.ID))
		if r.SucceededAt != nil {
			add(*r.SucceededAt, LayerRecharge, "recharge → SUCCEEDED", "recharge_id", ids.Format(r.ID))
		}
	}
	for _, m := range x.Outbox {
		add(m.CreatedAt, LayerOutbox, "message "+m.Type+" written to "+m.Topic, "message_id", ids.Format(m.ID), "request_id", m.RequestID)
		if m.PublishedAt != nil {
			add(*m.PublishedAt, LayerOutbox, "message "+m.Type+" published", "message_id", ids.Format(m.ID))
		}
	}
	for _, ev := range x.Events {
		add(ev.CreatedAt, LayerWebhook, "event "+ev.Type, "event_id", ids.Format(ev.ID), "request_id", ev.RequestID)
		for _, d := range ev.Delivery {
			for _, a := range d.Sent {
				what := fmt.Sprintf("delivery of %s, attempt %d: %d", ev.Type, a.Attempt, a.StatusCode)
				if a.Error != nil && *a.Error != "" {
					what += " (" + *a.Error + ")"
				}
				add(a.SentAt, LayerWebhook, what, "event_id", ids.Format(ev.ID), "delivery_id", ids.Format(d.ID),
					"endpoint_id", ids.Format(d.EndpointID), "attempt_id", ids.Format(a.ID))
			}
		}
	}
	ch := x.Channel
	for _, t := range ch.Trades {
		no := ""
		if t.TradeNo != nil {
			no = *t.TradeNo
		}
		add(t.CreatedAt, LayerChannel, "trade opened at "+t.Channel, "out_trade_no", t.OutTradeNo, "trade_no", no)
		if t.UpdatedAt.After(t.CreatedAt) {
			add(t.UpdatedAt, LayerChannel, "trade "+t.Status, "out_trade_no", t.OutTradeNo, "trade_no", no)
		}
	}
	for _, p := range ch.Payments {
		add(p.CreatedAt, LayerChannel, "payment "+p.Status+" reported", "payment_id", ids.Format(p.ID), "trade_no", p.TradeNo, "request_id", p.RequestID)
	}
	for _, r := range ch.Refunds {
		add(r.CreatedAt, LayerChannel, "refund requested", "refund_id", ids.Format(r.ID), "out_refund_no", r.OutRefundNo)
		if r.UpdatedAt.After(r.CreatedAt) {
			add(r.UpdatedAt, LayerChannel, "refund "+r.Status, "refund_id", ids.Format(r.ID), "out_refund_no", r.OutRefundNo)
		}
	}
	for _, cl := range ch.Claims {
		add(cl.CreatedAt, LayerChannel, cl.Space+" number claimed by "+cl.OwnerKind+" "+cl.OwnerNo, "channel", cl.Channel, "channel_no", cl.ChannelNo)
	}
	for _, a := range ch.Anomalies {
		add(a.CreatedAt, LayerChannel, "anomaly "+a.Kind, "anomaly_id", ids.Format(a.ID), "trade_no", a.TradeNo)
	}
	for _, t := range x.Ledger.Transfers {
		add(t.CreatedAt, LayerLedger, fmt.Sprintf("transfer %s of %d", t.Kind, t.Amount), "transfer_id", t.ID)
	}
	slices.SortStableFunc(x.Timeline, func(a, b Entry) int { return cmp.Compare(a.At.UnixNano(), b.At.UnixNano()) })
}
