// Package ledger keeps oncepay's books in double entry: every cent that moves is a transfer
// between accounts, written in the transaction of the change that moves it, never after it.
//
// A transfer is one business fact's movement of money, and its id is derived from the fact:
//
//	trade:<channel>:<trade_no>         a trade the channel took, placed once: into the
//	                                   merchant's revenue (it paid an order), a customer's
//	                                   balance (it paid a recharge) or suspense (it could not
//	                                   be applied: paid_after_close, duplicate_payment)
//	refund:<channel>:<out_refund_no>   a refund, pending while the channel works on it
//	refund:…:end                       its end: posted (the money left) or voided (it stayed)
//	refund:…:late                      a voided refund the channel carried out after all
//
// The primary key on the id is the fence that outlives the dedup record's purge (the
// service's second rule): a redelivered report, a replay or a Galera rerun that got past every
// layer above would write the same id again and fail, so the books can never move twice for
// one fact. A refund's end shares one id whichever way it ends, so a refund is posted or
// voided, once — TigerBeetle's two-phase transfers.
//
// Each transfer's postings sum to zero: the account money leaves gets −amount, the account it
// reaches +amount, so an account's balance is the sum of its postings. The channel's account
// is the books' boundary with the outside world: money enters through it (a payment) and
// leaves through it (a refund), so minus its balance is what the channel holds for oncepay —
// its bill's net. A pending refund's postings count in the accounts' pending balances until
// its end posts them or voids them.
//
// Customers' balances are also kept on their accounts rows (the balance a recharge credits,
// by a conditional in-place UPDATE); the house accounts — revenue, suspense, the channels' —
// are not kept anywhere but in their postings: a cached balance there would be a row that
// every payment of every order locks. Check compares the kept balances with the postings.
package ledger

import (
	"strconv"
	"time"

	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/platform/ids"
)

// The kinds of transfer.
const (
	// Capture places a trade the channel took.
	Capture = "capture"
	// Pending sets a refund's money aside while the channel works on it.
	Pending = "pending"
	// Post ends a pending refund whose money left through the channel.
	Post = "post"
	// Void ends a pending refund whose money stayed; it has no postings.
	Void = "void"
	// Late moves out of suspense the money of a voided refund that the channel reported
	// carried out after all (a refund_status_conflict), so that the channel's account still
	// equals its bill and suspense shows what an operator must settle.
	Late = "late"
)

// The house accounts.
const (
	// Revenue is the merchant's: what paid orders brought in, less their refunds.
	Revenue = "merchant:revenue"
	// Suspense holds money the chain could not place: a payment of an order that was closed
	// or already paid, until its refund takes it out.
	Suspense = "suspense"
)

// ChannelAccount is the account of the channel called name.
func ChannelAccount(name string) string { return "channel:" + name }

// CustomerAccount is the balance account of user id.
func CustomerAccount(id int64) string { return "customer:" + strconv.FormatInt(id, 10) }

// TradeID is the id of the transfer that places the channel's trade tradeNo.
func TradeID(channel, tradeNo string) string { return "trade:" + channel + ":" + tradeNo }

// RefundID is the id of refund outRefundNo's pending transfer at channel.
func RefundID(channel, outRefundNo string) string { return "refund:" + channel + ":" + outRefundNo }

// Transfer is a row of ledger_transfers.
type Transfer struct {
	ID   string
	Kind string
	// PendingID is, for a Post or a Void, the pending refund transfer it ends; it is unique,
	// so a refund ends once (the end's id says it too).
	PendingID *string
	// CaptureID is, for a Pending refund, the capture it gives back, when known: the checks
	// hold a trade's refunds to what it captured.
	CaptureID *string
	// Channel and Number name the fact: the channel's trade_no for a Capture, the refund's
	// out_refund_no for the others.
	Channel   string
	Number    string
	Amount    int64
	CreatedAt time.Time
}

// TableName is the table of Transfer.
func (Transfer) TableName() string { return "ledger_transfers" }

// Posting is a row of ledger_postings: one account's side of a transfer.
type Posting struct {
	ID         int64
	TransferID string
	Account    string
	// Amount is what the account received: negative for the account the money left.
	Amount int64
	// Pending marks the postings of a Pending transfer.
	Pending   bool
	CreatedAt time.Time
}

// TableName is the table of Posting.
func (Posting) TableName() string { return "ledger_postings" }

// Books writes transfers. Its methods return the rows of one transfer — the transfer and its
// postings — for the batch of the write that moves the money (database.Batch.Insert), among
// its new rows.
type Books struct {
	ids *ids.Generator
}

// New returns the books, whose postings take their ids from gen.
func New(gen *ids.Generator) *Books { return &Books{ids: gen} }

// Rows are the rows of one transfer, in the order they are inserted.
type Rows struct {
	Transfer *Transfer
	Postings []Posting
}

// Values are r's rows as database.Batch.Insert takes them.
func (r Rows) Values() []any {
	if len(r.Postings) == 0 {
		return []any{r.Transfer}
	}
	return []any{r.Transfer, r.Postings}
}

// CaptureTrade places amount of the channel's trade tradeNo into account to: Revenue for a
// payment of an order, CustomerAccount for a recharge, Suspense for a payment kept as an
// anomaly.
func (b *Books) CaptureTrade(channel, tradeNo string, amount int64, to string) Rows {
	return b.move(&Transfer{ID: TradeID(channel, tradeNo), Kind: Capture, Channel: channel, Number: tradeNo, Amount: amount},
		ChannelAccount(channel), to, false)
}

// Refund is a refund as the books see it.
type Refund struct {
	Channel     string
	OutRefundNo string
	Amount      int64
	// TradeNo is the trade refunded, when known.
	TradeNo *string
	// From is the account the money goes back from: Revenue for a refund a customer asked
	// for, Suspense for the refund of a payment kept as an anomaly.
	From string
}

// Hold is the pending transfer of refund r, written with the refund's row.
func (b *Books) Hold(r Refund) Rows {
	t := &Transfer{ID: RefundID(r.Channel, r.OutRefundNo), Kind: Pending, Channel: r.Channel, Number: r.OutRefundNo, Amount: r.Amount}
	if r.TradeNo != nil {
		capture := TradeID(r.Channel, *r.TradeNo)
		t.CaptureID = &capture
	}
	return b.move(t, r.From, ChannelAccount(r.Channel), true)
}

// End is the end of refund r: posted when the money left through the channel, else voided.
func (b *Books) End(r Refund, posted bool) Rows {
	pending := RefundID(r.Channel, r.OutRefundNo)
	t := &Transfer{ID: pending + ":end", Kind: Void, PendingID: &pending, Channel: r.Channel, Number: r.OutRefundNo, Amount: r.Amount}
	if !posted {
		t.CreatedAt = clock.Now()
		return Rows{Transfer: t}
	}
	t.Kind = Post
	return b.move(t, r.From, ChannelAccount(r.Channel), false)
}

// LateRefund moves out of suspense the money of refund r, voided, that the channel reported
// carried out after all.
func (b *Books) LateRefund(r Refund) Rows {
	pending := RefundID(r.Channel, r.OutRefundNo)
	t := &Transfer{ID: pending + ":late", Kind: Late, Channel: r.Channel, Number: r.OutRefundNo, Amount: r.Amount}
	return b.move(t, Suspense, ChannelAccount(r.Channel), false)
}

// move completes t as amount moved from account from to account to.
func (b *Books) move(t *Transfer, from, to string, pending bool) Rows {
	t.CreatedAt = clock.Now()
	return Rows{Transfer: t, Postings: []Posting{
		{ID: b.ids.Next(), TransferID: t.ID, Account: from, Amount: -t.Amount, Pending: pending, CreatedAt: t.CreatedAt},
		{ID: b.ids.Next(), TransferID: t.ID, Account: to, Amount: t.Amount, Pending: pending, CreatedAt: t.CreatedAt},
	}}
}
