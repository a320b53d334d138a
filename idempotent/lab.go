package idempotent

import (
	"context"
	"errors"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent/internal/labkit"
)

// lab holds the switches that make the guard weaker or slower, never more correct, as the
// guard reads them (Guard.cfg.Lab). They are set through package idemlab — for the bench,
// which prices each layer, and the training lab, which reproduces the incident each one
// stops — and carried by Config's unexported field; a service cannot name them, and its
// guard is the one the package doc describes. idemlab.Lab documents each switch.
type lab struct {
	NoLock      bool
	NoWatchdog  bool
	NoCache     bool
	RedsyncLock bool
	RecordFirst bool
	BeforeWork  func(ctx context.Context, k Key) error
	ForgetLease func(ctx context.Context, k Key) bool
	Unguarded   bool
}

// set reports whether any switch is on: the guard then runs a design the lab or the bench
// models, with the lease on every request (Guard.fencedByRecord).
func (l lab) set() bool {
	return l.NoLock || l.NoWatchdog || l.NoCache || l.RedsyncLock || l.RecordFirst || l.Unguarded ||
		l.BeforeWork != nil || l.ForgetLease != nil
}

// settings is the guard's configuration: the Config it was given, defaults applied, and the
// lab's switches that Config carried.
type settings struct {
	Config
	Lab lab
}

func init() {
	labkit.Set = func(cfg any, s labkit.Switches) any {
		c := cfg.(Config)
		c.lab = s
		return c
	}
	labkit.Get = func(cfg any) labkit.Switches { return cfg.(Config).lab }
}

// newSettings is cfg with its defaults, and its lab switches as the guard reads them.
func newSettings(cfg Config) settings {
	s := cfg.lab
	l := lab{
		NoLock: s.NoLock, NoWatchdog: s.NoWatchdog, NoCache: s.NoCache,
		RedsyncLock: s.RedsyncLock, RecordFirst: s.RecordFirst, Unguarded: s.Unguarded,
	}
	if f := s.BeforeWork; f != nil {
		l.BeforeWork = func(ctx context.Context, k Key) error { return f(ctx, k.Scope, k.BizType, k.BizKey) }
	}
	if f := s.ForgetLease; f != nil {
		l.ForgetLease = func(ctx context.Context, k Key) bool { return f(ctx, k.Scope, k.BizType, k.BizKey) }
	}
	return settings{Config: cfg.withDefaults(), Lab: l}
}

// unguarded is Do with idemlab's Lab.Unguarded: the request's work and nothing of the guard.
func (g *Guard) unguarded(ctx context.Context, req Request, work Work) (Result, error) {
	if req.Before != nil {
		if err := req.Before(ctx); err != nil {
			return Result{Outcome: Failed, Layer: layerWork}, err
		}
	}
	var (
		resp     Response
		recorded bool
	)
	err := g.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		return work(ctx, tx, func(r Response) error {
			if recorded {
				return errRecordedTwice
			}
			recorded, resp = true, r
			if !storable(r.Status) {
				return errNotStored
			}
			return nil
		})
	})
	switch {
	case err == nil && !recorded:
		return Result{Outcome: Failed, Layer: layerWork}, errNotRecorded
	case err == nil, errors.Is(err, errNotStored):
		res := Result{Response: resp, Outcome: Executed, Layer: layerWork}
		if req.After != nil {
			req.After(ctx, res)
		}
		return res, nil
	}
	if r, ok := g.reject(ctx, req, err); ok {
		return Result{Response: r, Outcome: StateRejected, Layer: layerWork, Rejection: err}, nil
	}
	return Result{Outcome: Failed, Layer: layerWork}, err
}
