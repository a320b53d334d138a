package lab

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/go-chi/chi/v5"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/idemlab"
	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/platform/redisx"
)

// Settings are the lab build's own settings (bin/oncepay-lab, tools/cmd/oncepay-lab), read
// beside the service's: the service's configuration (internal/config) knows none of them, and
// bin/oncepay reads none. They turn on the replicas and the faults the drill and the chaos run
// need; their zero value is the service as it runs.
type Settings struct {
	// Lab mounts the naive replicas of the articles' bugs under /lab/ for drills.
	Lab bool `env:"ONCEPAY_LAB" envDefault:"false"`
	// PaymentDelay is a drill fault: every trade report (an order's or a recharge's) sleeps
	// this long while it holds its key's lease, before its transaction begins, so that the
	// watchdog's renewals (I4) can be watched; the lab's naive payment sleeps at least as long.
	PaymentDelay time.Duration `env:"ONCEPAY_CHAOS_PAYMENT_DELAY" envDefault:"0s"`
	// ClockOffset is a chaos fault: the instance's wall clock (internal/platform/clock) runs
	// this far off the machine's, ahead or (negative) behind, for the chaos run's clock skew.
	// Every timestamp the instance stamps and every decision it takes on its own clock moves
	// with it; what must agree across instances takes the database's clock.
	ClockOffset time.Duration `env:"ONCEPAY_CHAOS_CLOCK_OFFSET" envDefault:"0s"`
	// RedisRoutes are Redis addresses the instance dials at another address, "real=proxy,…",
	// so that the chaos run's proxies stand between each instance and every node of a Redis
	// Cluster, whose clients dial the addresses the nodes announce (redisx.SetRoutes).
	RedisRoutes map[string]string `env:"ONCEPAY_CHAOS_REDIS_ROUTES" envKeyValSeparator:"="`
}

// LoadSettings reads Settings from the environment.
func LoadSettings() (Settings, error) {
	s, err := env.ParseAs[Settings]()
	if err != nil {
		return Settings{}, err
	}
	if s.PaymentDelay < 0 {
		return Settings{}, errors.New("ONCEPAY_CHAOS_PAYMENT_DELAY: use a duration of 0 or more, such as 7s")
	}
	return s, nil
}

// LogValue lists the settings for the start-up log.
func (s Settings) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Bool("lab", s.Lab),
		slog.String("chaos_payment_delay", s.PaymentDelay.String()),
		slog.String("chaos_clock_offset", s.ClockOffset.String()),
		slog.Any("chaos_redis_routes", s.RedisRoutes),
	)
}

// Apply sets the process-wide faults, before app.New dials anything: the clock offset and the
// Redis routes. The clock is the process's, as a real clock is: a zero offset leaves it as it
// is, for the tests that run several instances in one process.
func (s Settings) Apply(ctx context.Context) {
	if s.ClockOffset != 0 {
		clock.SetOffset(s.ClockOffset)
		slog.WarnContext(ctx, "chaos: this instance's wall clock runs off the machine's", "offset", s.ClockOffset.String())
	}
	if len(s.RedisRoutes) > 0 {
		redisx.SetRoutes(s.RedisRoutes)
	}
}

// Deps is what the lab's build hands app.New: the replicas under /lab when Lab is set, and
// PaymentDelay as the guard's pause under the lease (idemlab's BeforeWork). The caller adds
// the connections it owns, if any.
func (s Settings) Deps() app.Deps {
	var deps app.Deps
	if s.Lab {
		deps.Routes = func(a *app.App, r chi.Router) { mount(a, r, s.PaymentDelay) }
	}
	if s.PaymentDelay > 0 {
		pause := PauseTrades(s.PaymentDelay)
		deps.GuardConfig = func(cfg idempotent.Config) idempotent.Config {
			return idemlab.With(cfg, idemlab.Lab{BeforeWork: pause})
		}
	}
	return deps
}

// PauseTrades is a guard's BeforeWork that sleeps d in every trade report, holding its lease
// and no transaction: a slow upstream under the lock (I4). A canceled request stops waiting.
func PauseTrades(d time.Duration) func(ctx context.Context, k idempotent.Key) error {
	return func(ctx context.Context, k idempotent.Key) error {
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
}

// mount mounts the replicas under /lab on a's router; delay is ONCEPAY_CHAOS_PAYMENT_DELAY.
func mount(a *app.App, r chi.Router, delay time.Duration) {
	l := New(a.DB, a.Redis.Client, a.Config.RedisPrefix, a.IDs, a.Orders(), a.Config.OrderTTL, a.Config.ChannelSecret, delay)
	// I18's lossy network forwards to the instance's own routes.
	l.upstream = r
	r.Mount("/lab", l.Routes(a.RequireUser(), a.RequireAdmin()))
}
