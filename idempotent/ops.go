package idempotent

import "github.com/oncepay/oncepay/idempotent/internal/opskit"

// The guard's operations beyond the request path — its attempt log, eviction, the lookup by
// business key, the lease's state, a token's state, the jobs' lock — are package idemops's functions.
func init() {
	opskit.Installed = opskit.Ops[*Guard, Key, Record]{
		Attempts:     (*Guard).attempts,
		Evict:        (*Guard).evict,
		LookupBizKey: (*Guard).lookupBizKey,
		InFlight:     (*Guard).inFlight,
		RunLocked:    (*Guard).runLocked,
		Token:        (*Guard).token,
	}
}
