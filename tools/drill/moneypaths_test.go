package drill

import (
	"slices"
	"strings"
	"testing"
)

// The judgements of I12 and I13 on what each target left behind, as make drill sees it: the
// lab's damage must read as the incident, oncepay's clean run as nothing at all.

func TestRefusedCancelJudgesTheTradeAndThePayment(t *testing.T) {
	reused := copyRecord{Via: "http", Status: 422, Code: "idempotency_key_reused", Outcome: "mismatch"}
	held := cancelSeen{id: "42", reused: reused, afterCancel: "PENDING_PAYMENT", trade: "WAIT_BUYER_PAY",
		pay: copyRecord{Via: "http", Status: 200}, delivered: copyRecord{Via: "http", Status: 200, Outcome: "executed"},
		final: "PAID", stock: stockDelta{-1, 0, 1}}
	var f findings
	checkRefusedCancel(&f, held)
	if len(f.effect)+len(f.answers) != 0 {
		t.Errorf("oncepay's run: effect %q, answers %q; want none", f.effect, f.answers)
	}

	lab := held
	lab.trade, lab.pay, lab.final, lab.stock = "CLOSED", copyRecord{Via: "http", Status: 409, Code: "trade_closed"}, "PENDING_PAYMENT", stockDelta{-1, 1, 0}
	lab.reused.Outcome = "mismatch"
	f = findings{}
	checkRefusedCancel(&f, lab)
	if len(f.effect) != 2 || !strings.Contains(f.effect[0], "had already closed the order's trade at the channel: CLOSED") ||
		!strings.Contains(f.effect[1], "answered 409 trade_closed; the order stays PENDING_PAYMENT and can never be paid") {
		t.Errorf("the lab's run: effect %q", f.effect)
	}

	executed := held
	executed.reused, executed.afterCancel = copyRecord{Via: "http", Status: 200, Outcome: "executed"}, "CANCELLED"
	f = findings{}
	checkRefusedCancel(&f, executed)
	if len(f.answers) != 1 || !strings.Contains(f.answers[0], "want 422 idempotency_key_reused") ||
		!slices.ContainsFunc(f.effect, func(e string) bool { return strings.Contains(e, "moved the order to CANCELLED") }) {
		t.Errorf("a reused key that cancelled: answers %q, effect %q", f.answers, f.effect)
	}
}

func TestPurgedRedeliveryJudgesTheSecondRefund(t *testing.T) {
	first := []simRefund{{OutRefundNo: "RF1", OutTradeNo: "42", Status: "SUCCESS", Amount: 1999}}
	held := redeliverySeen{answer: copyRecord{Via: "http", Status: 200, Outcome: "state_rejected"}, layered: true,
		refundsBefore: first, refundsAfter: first, anomaliesBefore: []string{}, anomaliesAfter: []string{}, status: "REFUNDED"}
	var f findings
	checkPurgedRedelivery(&f, held)
	if len(f.effect)+len(f.answers) != 0 {
		t.Errorf("oncepay's run: effect %q, answers %q; want none", f.effect, f.answers)
	}

	lab := held
	lab.answer, lab.layered = copyRecord{Via: "http", Status: 200}, false
	lab.asked = &askedRefund{OutRefundNo: "LAB-RF-7", Amount: 1999, Status: 409, Code: "refund_exceeds"}
	f = findings{}
	checkPurgedRedelivery(&f, lab)
	if len(f.effect) != 1 || !strings.Contains(f.effect[0], "a second refund (LAB-RF-7 of 1999, refused 409 refund_exceeds) was asked of the channel") ||
		!strings.Contains(f.effect[0], "only the channel's cap refused it") {
		t.Errorf("the lab's run: effect %q", f.effect)
	}
	if len(f.answers) != 0 {
		t.Errorf("the lab names no layer, and answered 200: answers %q", f.answers)
	}
	f = findings{}
	executed := held
	executed.answer.Outcome = "executed"
	checkPurgedRedelivery(&f, executed)
	if len(f.answers) != 1 || !strings.Contains(f.answers[0], "want Idempotency-Outcome: state_rejected") {
		t.Errorf("oncepay's redelivery executed: answers %q", f.answers)
	}

	kept := held
	kept.answer.Outcome = "state_rejected"
	kept.anomaliesAfter = []string{"paid_after_close"}
	kept.refundsAfter = append(slices.Clone(first), simRefund{OutRefundNo: "RF2", OutTradeNo: "42", Amount: 1999})
	kept.status = "PAID"
	f = findings{}
	checkPurgedRedelivery(&f, kept)
	for _, want := range []string{"1 refund (RF1 1999) before", "recorded paid_after_close for the order", "moved the refunded order to PAID"} {
		if !slices.ContainsFunc(f.effect, func(e string) bool { return strings.Contains(e, want) }) {
			t.Errorf("effect %q lacks %q", f.effect, want)
		}
	}
	if got := (*askedRefund)(nil).text(); got != "none" {
		t.Errorf("nothing asked reads %q", got)
	}
}
