package drill

import (
	"context"
	"fmt"
	"time"
)

// lateHolderCase is one of the two incidents in which a lease's holder writes after a second
// copy of the same notification took the lease and paid: the server (only the lab's routes
// take it, so both runs need ONCEPAY_LAB=true) holds the first copy for pause (?pause=), and
// the second comes secondAt later. Oncepay's run goes through oncepay's guard and order
// service, where the state precondition and the dedup record's unique key refuse the first
// holder's write; the lab's goes through the naive lock and an unconditional write, and pays
// twice.
type lateHolderCase struct {
	id string
	// route is the notify route of the case on rt.
	route func(rt routes) string
	// pause holds the first holder; secondAt is when the second copy is sent.
	pause, secondAt time.Duration
	// holder and second name the two copies in the report.
	holder, second string
	// story is what happened to the first holder's lease, for the report's held line.
	story string
}

// staleWriter is I10: a lock holder paused past its lease (a GC pause, a stopped process)
// wakes after another copy took the lock and paid, and writes anyway. No lock can stop that;
// the store must refuse the stale write. The lease is 1 s on both I10 routes and never
// renewed; the retry comes once it has run out and is done long before the holder wakes.
var staleWriter = lateHolderCase{
	id:       "I10",
	route:    func(rt routes) string { return rt.pausedNotify },
	pause:    3 * time.Second,
	secondAt: 1500 * time.Millisecond,
	holder:   "paused holder",
	second:   "retry after the lease",
	story:    "the holder, paused 3s past its 1s lease, wrote after the retry had paid",
}

// failoverHolders is I15: two holders of one lease after a Redis failover. A master granted
// the holder's lease and died before its replica saw it; the promoted replica grants the
// lease again to the next copy, while the first holder still works. The server models the
// failover: the holder's lease key is deleted right after it was taken, which leaves Redis as
// such a failover does, and the holder then works for the pause (oncepay's watchdog on, the
// default 30 s lease). The second copy finds no lease and is done long before the holder
// writes.
var failoverHolders = lateHolderCase{
	id:       "I15",
	route:    func(rt routes) string { return rt.failoverNotify },
	pause:    3 * time.Second,
	secondAt: time.Second,
	holder:   "holder whose lease the failover loses",
	second:   "copy granted the lease again",
	story:    "two holders at once (the lease lost to the failover and granted again)",
}

// lateHolder runs c: an order, the two copies of its notification, and the checks that it
// was paid once and that the second copy was answered while the first still held its lease.
func lateHolder(c lateHolderCase) func(*drill, context.Context, routes) (outcome, error) {
	return func(d *drill, ctx context.Context, rt routes) (outcome, error) {
		var out outcome
		if !d.lab {
			out.skipped = fmt.Sprintf("the server holds a lease's holder only under /lab/: start it with ONCEPAY_LAB=true to run %s", c.id)
			return out, nil
		}
		sku, o, err := d.orderOnNewSKU(ctx, rt, c.id, 1)
		if err != nil {
			return out, err
		}
		tradeNo, body := d.notification(string(o.OrderID), o.Amount)
		shots := []shot{
			d.notifyShot(0, c.holder, c.route(rt)+"?pause="+c.pause.String(), body),
			d.notifyShot(c.secondAt, c.second, c.route(rt), body),
		}
		w := d.watchOrder(ctx, o)
		out.copies = fireAll(ctx, shots)
		final, after, err := d.finalState(ctx, w, string(o.OrderID), sku.SKU)
		if err != nil {
			return out, err
		}
		checkNotifyAnswers(&out.findings, out.copies)
		checkPaidOnce(&out.findings, w, final, after.since(sku), tradeNo)
		holder, second := out.copies[0], out.copies[1]
		overlapped := holder.Error == "" && second.Error == "" && second.StartMS+second.DurationMS < holder.StartMS+holder.DurationMS
		if !overlapped {
			out.notef("the %s was not answered while the %s still held its lease (+%s against +%s), so the holder did not write last; "+
				"the server was too busy to replay %s's order of events", c.second, c.holder,
				fmtMS(second.StartMS+second.DurationMS), fmtMS(holder.StartMS+holder.DurationMS), c.id)
		}
		if rt.target == oncepayRoutes.target && holder.Outcome == "executed" && second.Outcome == "executed" {
			out.answerf("both the %s and the %s report Idempotency-Outcome: executed", c.holder, c.second)
		}
		out.expected = fmt.Sprintf("PAID once, by the %s; the %s's late write refused; stock available -1, reserved +0, sold +1", c.second, c.holder)
		out.observed = fmt.Sprintf("%s; stock %s; paid_at %s; the %s answered %s after %s, the %s %s after %s", final.Status, after.since(sku),
			orNone(w.paidAtPath()), c.second, answerSummary(second), fmtMS(second.DurationMS), c.holder, answerSummary(holder), fmtMS(holder.DurationMS))
		out.held = fmt.Sprintf("%s; the first holder's write was refused (%s); paid once", c.story, answerSummary(holder))
		if !overlapped {
			out.held = "paid once, although the two copies did not overlap"
		}
		return out, nil
	}
}
