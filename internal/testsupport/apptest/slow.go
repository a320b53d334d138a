package apptest

import (
	"context"
	"time"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/idemlab"
	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/notify"
)

// SlowTrades returns deps whose guard holds every trade report's key for d before its
// transaction begins (idemlab's BeforeWork, through Deps.GuardConfig): a payment still being
// applied, for the tests that must meet one — a copy answered 409 in_progress, a cancel that
// finds the payment's key in use, a consumer that loses its partition mid-payment. A canceled
// request stops waiting.
func SlowTrades(deps app.Deps, d time.Duration) app.Deps {
	pause := func(ctx context.Context, k idempotent.Key) error {
		if k.BizType != notify.BizTypeTrade {
			return nil
		}
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	deps.GuardConfig = func(cfg idempotent.Config) idempotent.Config {
		return idemlab.With(cfg, idemlab.Lab{BeforeWork: pause})
	}
	return deps
}
