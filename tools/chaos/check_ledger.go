package chaos

import (
	"context"
	"fmt"

	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/oncepay/oncepay/internal/channel"
	"github.com/oncepay/oncepay/internal/ledger"
)

// checkLedger checks oncepay's books after the run: on their own (ledger_balanced: every
// transfer sums to zero, all postings sum to zero, kept balances equal their postings, no
// trade refunded beyond its capture), against oncepay's rows (ledger_matches_rows: each
// payment, recharge, kept payment and refund has exactly its transfers) — both one query,
// ledger.Check — and against the channel's own books (ledger_matches_channel: every trade the
// channel took is captured once at its amount, every refund it carried out is posted, and the
// channel's account is minus what the channel holds).
func (c *checker) checkLedger(ctx context.Context) error {
	db, err := gorm.Open(gormmysql.New(gormmysql.Config{Conn: c.db}), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	vs, err := ledger.Check(ctx, db)
	if err != nil {
		return err
	}
	families := map[string][]string{}
	for _, v := range vs {
		families[v.Check] = append(families[v.Check], v.String())
	}
	var transfers int
	if err := c.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM ledger_transfers`).Scan(&transfers); err != nil {
		return err
	}
	c.add("ledger_balanced", "every transfer's postings sum to zero, all postings sum to zero, every kept balance is its postings' sum, no trade refunded beyond its capture", transfers, families[ledger.Balanced])
	c.add("ledger_matches_rows", "each payment, succeeded recharge, kept payment and refund has exactly its transfers, of its amount", transfers, families[ledger.MatchesRows])

	cvs, checked, err := c.ledgerMatchesChannel(ctx, db)
	if err != nil {
		return err
	}
	c.add("ledger_matches_channel", "every trade the channel took is captured once at its amount, every refund it carried out is posted, and the channel's account is minus the channel's net", checked, cvs)
	return nil
}

// ledgerMatchesChannel compares the channel's trades and refunds with the books, line by line
// and in total.
func (c *checker) ledgerMatchesChannel(ctx context.Context, db *gorm.DB) ([]string, int, error) {
	var vs []string
	name := c.state.Channel
	// The channel's transfers, read once: the run's books fit in memory.
	type moved struct {
		kind   string
		amount int64
	}
	transfers := map[string]moved{}
	rows, err := c.db.QueryContext(ctx, `SELECT id, kind, amount FROM ledger_transfers WHERE channel = ?`, name)
	if err != nil {
		return nil, 0, err
	}
	for rows.Next() {
		var id string
		var m moved
		if err := rows.Scan(&id, &m.kind, &m.amount); err != nil {
			rows.Close()
			return nil, 0, err
		}
		transfers[id] = m
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	var net, checked int64
	for _, t := range c.state.Trades {
		if t.Status != channel.TradeSuccess {
			continue
		}
		checked++
		net += t.Amount
		if got := transfers[ledger.TradeID(name, t.TradeNo)].amount; got != t.Amount {
			vs = append(vs, fmt.Sprintf("the channel took trade %s (out_trade_no %s) for %d; the books captured %d", t.TradeNo, t.OutTradeNo, t.Amount, got))
		}
	}
	for _, r := range c.state.Refunds {
		if r.Status != channel.RefundSuccess {
			continue
		}
		checked++
		net -= r.Amount
		id := ledger.RefundID(name, r.OutRefundNo)
		m := transfers[id+":end"]
		if m.kind != ledger.Post {
			m = transfers[id+":late"]
		}
		if m.amount != r.Amount || (m.kind != ledger.Post && m.kind != ledger.Late) {
			vs = append(vs, fmt.Sprintf("the channel refunded %s (%s) %d; the books posted %d (%q)", r.OutRefundNo, r.RefundNo, r.Amount, m.amount, m.kind))
		}
	}
	b, err := ledger.BalanceOf(ctx, db, ledger.ChannelAccount(name))
	if err != nil {
		return nil, 0, err
	}
	if -b.Posted != net {
		vs = append(vs, fmt.Sprintf("the channel %s holds %d for oncepay (trades taken less refunds carried out); its account in the books is %d", name, net, b.Posted))
	}
	return vs, int(checked), nil
}
