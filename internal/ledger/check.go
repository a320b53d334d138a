package ledger

import (
	"context"
	"fmt"
	"strings"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/platform/database"
)

// Violation is one way the books are wrong, as Check finds it.
type Violation struct {
	// Check is the family: ledger_balanced (the books hold together on their own) or
	// ledger_matches_rows (each payment, recharge, kept payment and refund has exactly its
	// transfers, of its amount).
	Check string `json:"check"`
	// Rule is the rule broken, for example transfer_unbalanced or payment_without_capture.
	Rule string `json:"rule"`
	// Subject names what breaks it: a transfer id, an account, a trade or refund number.
	Subject string `json:"subject"`
	Got     int64  `json:"got"`
	Want    int64  `json:"want"`
}

// String prints v in full, as a checker must.
func (v Violation) String() string {
	return fmt.Sprintf("%s/%s %s: got %d, want %d", v.Check, v.Rule, v.Subject, v.Got, v.Want)
}

// The families of Violation.
const (
	Balanced    = "ledger_balanced"
	MatchesRows = "ledger_matches_rows"
)

// checks are the rules of Check, each a SELECT of (check, rule, subject, got, want) that
// returns the rows breaking it. {concat:a,b,…} is the dialect's string concatenation.
var checks = []string{
	// Every transfer's postings sum to zero.
	`SELECT '` + Balanced + `', 'transfer_unbalanced', transfer_id, SUM(amount), 0
	 FROM ledger_postings GROUP BY transfer_id HAVING SUM(amount) <> 0`,
	// All postings sum to zero: no money created or lost.
	`SELECT '` + Balanced + `', 'books_sum', 'all', COALESCE(SUM(amount), 0), 0
	 FROM ledger_postings HAVING COALESCE(SUM(amount), 0) <> 0`,
	// A transfer moves its amount (a void moves nothing), between two accounts.
	`SELECT '` + Balanced + `', 'transfer_amount', t.id, COALESCE(SUM(CASE WHEN p.amount > 0 THEN p.amount ELSE 0 END), 0),
	        CASE WHEN t.kind = 'void' THEN 0 ELSE t.amount END
	 FROM ledger_transfers t LEFT JOIN ledger_postings p ON p.transfer_id = t.id
	 GROUP BY t.id, t.kind, t.amount
	 HAVING COALESCE(SUM(CASE WHEN p.amount > 0 THEN p.amount ELSE 0 END), 0) <> CASE WHEN t.kind = 'void' THEN 0 ELSE t.amount END`,
	// A customer's kept balance is the sum of its account's posted postings.
	`SELECT '` + Balanced + `', 'customer_balance', {concat:'customer:',a.user_id},
	        COALESCE((SELECT SUM(p.amount) FROM ledger_postings p WHERE p.account = {concat:'customer:',a.user_id} AND p.pending = FALSE), 0),
	        a.balance
	 FROM accounts a
	 WHERE a.balance <> COALESCE((SELECT SUM(p.amount) FROM ledger_postings p WHERE p.account = {concat:'customer:',a.user_id} AND p.pending = FALSE), 0)`,
	// A trade's refunds, pending or posted, never take more than it captured.
	`SELECT '` + Balanced + `', 'refunds_exceed_capture', c.id, SUM(r.amount), c.amount
	 FROM ledger_transfers c JOIN ledger_transfers r ON r.capture_id = c.id AND r.kind = 'pending'
	 WHERE NOT EXISTS (SELECT 1 FROM ledger_transfers v WHERE v.pending_id = r.id AND v.kind = 'void')
	 GROUP BY c.id, c.amount HAVING SUM(r.amount) > c.amount`,

	// Each payment, SUCCEEDED recharge and refundable kept payment is its trade's capture.
	`SELECT '` + MatchesRows + `', 'payment_capture', {concat:p.channel,':',p.trade_no}, COALESCE(t.amount, -1), p.amount
	 FROM payments p LEFT JOIN ledger_transfers t ON t.kind = 'capture' AND t.channel = p.channel AND t.number = p.trade_no
	 WHERE t.id IS NULL OR t.amount <> p.amount`,
	`SELECT '` + MatchesRows + `', 'recharge_capture', {concat:rc.channel,':',rc.trade_no}, COALESCE(t.amount, -1), rc.amount
	 FROM recharges rc LEFT JOIN ledger_transfers t ON t.kind = 'capture' AND t.channel = rc.channel AND t.number = rc.trade_no
	 WHERE rc.status = 'SUCCEEDED' AND (t.id IS NULL OR t.amount <> rc.amount)`,
	`SELECT '` + MatchesRows + `', 'kept_capture', {concat:an.channel,':',an.trade_no}, COALESCE(t.amount, -1), an.amount
	 FROM anomalies an LEFT JOIN ledger_transfers t ON t.kind = 'capture' AND t.channel = an.channel AND t.number = an.trade_no
	 WHERE an.kind IN ('paid_after_close', 'duplicate_payment') AND an.space = 'trade'
	   AND (an.order_id IS NOT NULL OR an.recharge_id IS NOT NULL) AND (t.id IS NULL OR t.amount <> an.amount)`,
	// A capture is a payment's, a recharge's or a kept payment's: never nobody's.
	`SELECT '` + MatchesRows + `', 'capture_without_row', t.id, t.amount, 0
	 FROM ledger_transfers t WHERE t.kind = 'capture'
	   AND NOT EXISTS (SELECT 1 FROM payments p WHERE p.channel = t.channel AND p.trade_no = t.number)
	   AND NOT EXISTS (SELECT 1 FROM recharges rc WHERE rc.channel = t.channel AND rc.trade_no = t.number AND rc.status = 'SUCCEEDED')
	   AND NOT EXISTS (SELECT 1 FROM anomalies an WHERE an.channel = t.channel AND an.trade_no = t.number AND an.space = 'trade'
	                   AND an.kind IN ('paid_after_close', 'duplicate_payment'))`,
	// Each refund is held once, of its amount; it ends as its row did: SUCCEEDED posted,
	// FAILED voided, and one still under way not at all.
	`SELECT '` + MatchesRows + `', 'refund_pending', {concat:r.channel,':',r.out_refund_no}, COALESCE(t.amount, -1), r.amount
	 FROM refunds r LEFT JOIN ledger_transfers t ON t.kind = 'pending' AND t.channel = r.channel AND t.number = r.out_refund_no
	 WHERE t.id IS NULL OR t.amount <> r.amount`,
	`SELECT '` + MatchesRows + `', {concat:'refund_end_',r.status}, {concat:r.channel,':',r.out_refund_no},
	        COALESCE((SELECT COUNT(*) FROM ledger_transfers e WHERE e.kind IN ('post', 'void') AND e.channel = r.channel AND e.number = r.out_refund_no), 0),
	        CASE WHEN r.status IN ('SUCCEEDED', 'FAILED') THEN 1 ELSE 0 END
	 FROM refunds r
	 WHERE CASE WHEN r.status IN ('SUCCEEDED', 'FAILED') THEN 1 ELSE 0 END <>
	       (SELECT COUNT(*) FROM ledger_transfers e WHERE e.channel = r.channel AND e.number = r.out_refund_no
	         AND e.kind = CASE r.status WHEN 'SUCCEEDED' THEN 'post' WHEN 'FAILED' THEN 'void' ELSE 'none' END)
	   OR (SELECT COUNT(*) FROM ledger_transfers e WHERE e.kind IN ('post', 'void') AND e.channel = r.channel AND e.number = r.out_refund_no) > 1`,
}

// Check runs every rule of the books in one query on db and returns what breaks them, or
// none. It reads the whole ledger: it is for the checkers (the chaos run, the drills, the
// tests, an operator's GET /v1/admin/ledger/check), not for a request's path.
func Check(ctx context.Context, db *gorm.DB) ([]Violation, error) {
	query := strings.Join(checks, "\nUNION ALL\n")
	query = expandConcat(query, database.DialectOf(db))
	var out []Violation
	rows, err := db.WithContext(ctx).Raw(query).Rows()
	if err != nil {
		return nil, fmt.Errorf("ledger: check: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var v Violation
		var subject []byte
		if err := rows.Scan(&v.Check, &v.Rule, &subject, &v.Got, &v.Want); err != nil {
			return nil, fmt.Errorf("ledger: check: %w", err)
		}
		v.Subject = string(subject)
		out = append(out, v)
	}
	return out, rows.Err()
}

// expandConcat writes each {concat:a,b,…} of query in d's syntax: CONCAT(a, b, …) on MySQL,
// a || b || … on SQLite. The arguments hold no commas of their own.
func expandConcat(query string, d database.Dialect) string {
	var sb strings.Builder
	for {
		i := strings.Index(query, "{concat:")
		if i < 0 {
			sb.WriteString(query)
			return sb.String()
		}
		j := strings.Index(query[i:], "}")
		args := strings.Split(query[i+len("{concat:"):i+j], ",")
		sb.WriteString(query[:i])
		if d == database.MySQL {
			sb.WriteString("CONCAT(" + strings.Join(args, ", ") + ")")
		} else {
			sb.WriteString("(" + strings.Join(args, " || ") + ")")
		}
		query = query[i+j+1:]
	}
}
