// Package idempotent makes a write happen exactly once, whichever path a copy of it takes
// (client retry, gateway retry, Kafka redelivery, late job). It knows nothing of orders or
// payments: a caller names the write with a Key, describes the request with a fingerprint,
// and hands in the business work; the package decides whether the work runs.
//
// Four layers, cheapest first. The first three live in Redis and only save work; the fourth
// lives in the caller's database transaction and is the one that guarantees exactly-once.
//
//  1. Token (I7). A one-time token (tok_…) issued before a form is shown is consumed
//     atomically by a Lua script; a token that is missing or belongs to another user is
//     refused with idempotency_token_invalid.
//  2. Replay cache. A finished outcome is cached, so a duplicate is answered without touching
//     the database.
//  3. Lock (I4). A redsync mutex per key with a random value and compare-and-delete release.
//     A watchdog extends it every TTL/3 while the work runs; if an extension fails, the work's
//     context is cancelled so its transaction rolls back instead of committing unguarded. A
//     busy lock answers "in progress".
//  4. Dedup record (I3). The idempotency record is inserted FIRST, in the same local
//     transaction as the business change, and the outcome is stored on it before commit. A
//     duplicate-key error means another attempt got there: its committed outcome is replayed.
//
// When Redis is unreachable, layers 1–3 step aside (ONCEPAY_REDIS_FAILURE_MODE=degrade) or the
// request is refused with 503 (reject); layer 4 and the business state preconditions still
// hold, which is why the order of trust is: state precondition, dedup record, lock, cache.
//
// # Outcome rules
//
// What the dedup record stores decides what a retry sees. The rule, table-tested in
// TestStorable:
//
//	status of the work            stored and replayed?   why
//	2xx                           yes                    the write happened
//	4xx business outcome          yes                    deterministic: out_of_stock, illegal_state,
//	(400, 404, 409, 422 …)                               amount_mismatch answer the same again
//	401, 403, 408, 429            no                     about the caller or the moment, not the write
//	5xx, a returned error,        no (rolled back)       nothing happened; a retry runs again
//	a panic, a cancelled context
//
// A 4xx business outcome is stored with whatever the work left in the transaction, so the
// work must undo its own partial writes: run them in database.Transaction, which becomes a
// savepoint inside the dedup transaction.
package idempotent
