// Package labkit carries the bench's and the training lab's switches from package idemlab,
// which the bench and the training kit import, into package idempotent, whose Config has no field for
// them: a service cannot set what it cannot name. It imports nothing of the kit, so both
// sides import it; idempotent installs Set and Get when it is initialised.
package labkit

import "context"

// Switches are idemlab.Lab with its keys spelled out, so that this package needs no Key type.
type Switches struct {
	NoLock      bool
	NoWatchdog  bool
	NoCache     bool
	RedsyncLock bool
	RecordFirst bool
	Unguarded   bool
	BeforeWork  func(ctx context.Context, scope, bizType, bizKey string) error
	ForgetLease func(ctx context.Context, scope, bizType, bizKey string) bool
}

// Set returns cfg, an idempotent.Config, with s; Get returns the switches of cfg. Package
// idempotent installs both.
var (
	Set func(cfg any, s Switches) any
	Get func(cfg any) Switches
)
