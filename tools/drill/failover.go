package drill

import (
	"context"
	"fmt"
	"time"
)

// The timing of I15. The holder takes the lease, checks, loses the lease to the modelled
// failover and works on for i15Pause; the second copy comes at i15SecondAt, finds no lease
// and is done long before the holder writes.
const (
	i15Pause    = 3 * time.Second
	i15SecondAt = time.Second
)

// failoverHolders is I15: two holders of one lease after a Redis failover. A master granted
// the holder's lease and died before its replica saw it; the promoted replica grants the
// lease again to the next copy, while the first holder still works. The server models the
// failover on request (?pause=): the holder's lease key is deleted right after it was taken,
// which leaves Redis as such a failover does, and the holder then works for the pause. Only
// the lab's routes take it, so both runs need ONCEPAY_LAB=true: oncepay's run goes through
// oncepay's guard (its watchdog on, the default 30 s lease) and order service, where the
// state precondition and the dedup record's unique key refuse the first holder's write; the
// lab's goes through the naive lock and an unconditional write, and pays twice.
func (d *drill) failoverHolders(ctx context.Context, rt routes) (outcome, error) {
	var out outcome
	if !d.lab {
		out.skipped = "the server models a Redis failover only under /lab/: start it with ONCEPAY_LAB=true to run I15"
		return out, nil
	}
	sku, o, err := d.orderOnNewSKU(ctx, rt, "I15", 1)
	if err != nil {
		return out, err
	}
	tradeNo, body := d.notification(string(o.OrderID), o.Amount)
	shots := []shot{
		d.notifyShot(0, "holder whose lease the failover loses", rt.failoverNotify+"?pause="+i15Pause.String(), body),
		d.notifyShot(i15SecondAt, "copy granted the lease again", rt.failoverNotify, body),
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
		out.notef("the second copy was not answered while the first still held its lost lease (+%s against +%s): the two holders did not overlap; "+
			"the server was too busy to replay I15's order of events", fmtMS(second.StartMS+second.DurationMS), fmtMS(holder.StartMS+holder.DurationMS))
	}
	if rt.target == oncepayRoutes.target && holder.Outcome == "executed" && second.Outcome == "executed" {
		out.answerf("both holders report Idempotency-Outcome: executed")
	}
	out.expected = "two holders of the lease at once; PAID once, by the second; the first holder's write refused; stock available -1, reserved +0, sold +1"
	out.observed = fmt.Sprintf("%s; stock %s; paid_at %s; the second copy answered %s after %s, the first holder %s after %s", final.Status, after.since(sku),
		orNone(w.paidAtPath()), answerSummary(second), fmtMS(second.DurationMS), answerSummary(holder), fmtMS(holder.DurationMS))
	out.held = fmt.Sprintf("two holders at once (the lease lost to the failover and granted again); the first holder's write was refused (%s); paid once",
		answerSummary(holder))
	if !overlapped {
		out.held = "paid once, although the two holders did not overlap"
	}
	return out, nil
}
