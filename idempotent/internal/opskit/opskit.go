// Package opskit carries package idemops's calls into package idempotent, whose Guard keeps
// them unexported so that its own surface is what a service needs on the request path. It
// cannot import idempotent (idempotent imports it), so its Ops are typed by the core's Guard,
// Key and Record as type parameters; idempotent installs them when it is initialised.
package opskit

import (
	"context"
	"errors"
	"time"
)

// Ops are the guard's operations beyond the request path: its unexported methods, as method
// expressions (the guard first).
type Ops[G, K, R any] struct {
	Attempts     func(g G, ctx context.Context, k K) ([]Attempt, error)
	Evict        func(g G, ctx context.Context, k K) (R, error)
	LookupBizKey func(g G, ctx context.Context, bizType, bizKey string, limit int) ([]R, error)
	InFlight     func(g G, ctx context.Context, k K) (bool, time.Duration, error)
	RunLocked    func(g G, ctx context.Context, name string, fn func(ctx context.Context) error) (bool, error)
	Token        func(g G, ctx context.Context, token string) (Token, error)
}

// Token is idemops.Token, field for field (idemops converts it).
type Token struct {
	Found bool
	Used  bool
	Scope string
	TTL   time.Duration
}

// Installed is the Ops[*idempotent.Guard, idempotent.Key, idempotent.Record] of package
// idempotent.
var Installed any

// Attempt is idemops.Attempt, field for field (idemops converts it).
type Attempt struct {
	At         time.Time
	RequestID  string
	Via        string
	Outcome    string
	Layer      string
	Status     int
	Duration   time.Duration
	DurationMS float64
}

// The answers of Evict that are not a failure of the stores (idemops exports them).
var (
	ErrRecordNotFound  = errors.New("idempotency record not found")
	ErrEffectCommitted = errors.New("the stored outcome is a success: its effect committed, so it cannot be evicted")
)
