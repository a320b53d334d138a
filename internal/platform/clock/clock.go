// Package clock is the instance's wall clock: every stored timestamp and every decision that
// oncepay takes on its own clock reads Now. ONCEPAY_CHAOS_CLOCK_OFFSET shifts it, so that the
// chaos run can run one instance minutes off the others: Debian's faketime (libfaketime)
// cannot, because the Go runtime reads the clock through the vDSO, not libc.
//
// The offset is process-wide, as a real clock's error is: one process is one instance.
// Durations (latency, backoff, timeouts) keep time.Since and time.After, which a skewed wall
// clock does not change. A decision that must agree across instances — an order's expiry, a
// lease in the database — takes the database's clock instead (database.Now).
package clock

import (
	"sync/atomic"
	"time"
)

var offset atomic.Int64

// Now is the instance's wall-clock time in UTC: the machine's clock plus the offset.
func Now() time.Time { return time.Now().Add(time.Duration(offset.Load())).UTC() }

// Offset is the offset Now adds to the machine's clock.
func Offset() time.Duration { return time.Duration(offset.Load()) }

// SetOffset makes Now run d off the machine's clock (d may be negative) and returns the
// previous offset, for a test to restore.
func SetOffset(d time.Duration) time.Duration { return time.Duration(offset.Swap(int64(d))) }
