// Package idempotent makes a write happen exactly once, whichever path a copy of it takes
// (client retry, gateway retry, Kafka redelivery, late job). It knows nothing of orders,
// payments or HTTP, and imports no other package of oncepay: a caller names the write with a
// Key, describes the request with a fingerprint, and hands in the business work, which
// receives the transaction as its argument. The whole use, as ExampleGuard_Do runs it (the
// examples are this documentation's code, compiled and run by go test on SQLite):
//
//	guard := idempotent.New(db, rdb, idempotent.Config{Classify: sqliteerr.Classify}) // mysqlerr, pgerr
//
//	req := idempotent.Request{
//		Key:         idempotent.Key{Scope: "user:42", BizType: "note.create", BizKey: key},
//		Fingerprint: idempotent.Fingerprint("POST", "/notes", body),
//	}
//	res, err := guard.Do(ctx, req, idempotent.Respond(func(ctx context.Context, tx *gorm.DB) (idempotent.Response, error) {
//		if err := tx.Create(&note{Body: string(body)}).Error; err != nil { // on tx only
//			return idempotent.Response{}, err
//		}
//		return idempotent.Response{Status: http.StatusCreated}, nil
//	}))
//	// res.Outcome: executed, replayed, mismatch (ErrKeyReused), in_progress (ErrKeyInUse) …
//
// db is a *gorm.DB of gorm.io/driver/mysql (MySQL, MariaDB), gorm.io/driver/postgres or
// github.com/glebarez/sqlite, holding the table CreateSchema creates (or Schema in the
// service's migrations); rdb is a github.com/redis/go-redis/v9 client (redis.UniversalClient:
// a plain client or a cluster client). Respond wraps a work that answers at the end; a work
// with contended rows places its record itself (Work). The net/http side is
// idempotent/httpkey (Example_handler), a consumer calls Guard.Message (ExampleGuard_Message),
// and a form's one-time token comes from Guard.IssueToken (ExampleGuard_IssueToken).
// A work whose own unique key or precondition refuses the write marks the error with Conflict
// (ExampleConflict): a 409 stored and replayed, not a 500. idemtest.Run checks these promises
// on an adopter's own database and Redis. idempotent/README.md gives the install line, the
// drivers, the headers and every answer a client may get, in one page. What an operator or a
// job runner does beyond the request path (a key's attempt log, evicting a stored refusal, the
// jobs' cluster-wide lock) is idempotent/idemops.
//
// Work that must happen outside the transaction — a call to another system, such as closing
// a trade at a payment channel before a cancel — goes in Request.Before: it runs after the key
// is claimed, under its lease, and never for a refused request or a replay (I12: a side
// effect before the key). A follow-up that needs the committed row goes in Request.After.
//
// The table it needs, idempotency_records, is Schema (one definition per dialect). The guard
// reads the record's times whatever the MySQL DSN's parseTime says (TestMySQLWithoutParseTime);
// it writes them in UTC, which is go-sql-driver's default loc.
//
// Four layers, cheapest first. The first three live in Redis (and the guard's memory) and only
// save work; the fourth lives in the caller's database transaction and is the one that
// guarantees exactly-once.
//
//  1. Token (I7). A one-time token (tok_…) issued before a form is shown is consumed
//     atomically by a Lua script; a token that is missing or belongs to another scope is
//     refused with ErrTokenInvalid.
//  2. Replay cache. A finished outcome is cached, so a duplicate is answered without touching
//     the database. A request whose work is all in the transaction takes no lease and sends
//     Redis nothing on its path: its record fences it (layer 4), its copies at one guard wait
//     for the first one's answer holding no database connection, one at another guard waits on
//     the first one's uncommitted record and replays it, and the guard keeps its outcome in
//     memory (no round trip for a replay at the same guard; another guard's copy meets the
//     committed record and keeps it from then on). A purge or an eviction makes every guard
//     drop that memory before it returns: it sets an epoch in Redis to a new value, which each
//     guard reads at most once a second, and a guard that cannot read it answers from the
//     record. A request with a lease reads the Redis cache in its claim script.
//  3. Lock (I4). A request with work outside the transaction (Request.Before, Request.After)
//     takes a lease per key with a random owner, in the same Lua script that reads the cache
//     (one round trip), released, compare-and-delete, by the script that fills the cache (one
//     more): the outside call must run once, and no record can undo it. A watchdog timer
//     renews the lease every TTL/3 while the work runs; if a renewal fails, the work's context
//     is cancelled so its transaction rolls back instead of committing unguarded. A busy
//     lease answers "in progress" (ErrKeyInUse). The keys of one idempotency key share a
//     Redis Cluster hash slot.
//  4. Dedup record (I3). The finished record is inserted in the same local transaction as the
//     business change, after the work (one INSERT; bench/results/dedup-placement.md has the figures
//     that chose this over seed 000's insert-first). A duplicate-key error means another
//     attempt got there: the whole transaction rolls back — a stale writer whose lease expired
//     included (I10) — and the committed outcome is replayed.
//
// When Redis is unreachable, layers 1–3 step aside (degrade) or the request is refused with
// ErrUnavailable (Config.RejectWithoutRedis); layer 4 and the business state preconditions
// still hold, which is why the order of trust is: state precondition, dedup record, lock,
// cache.
//
// # Outcome rules
//
// What the dedup record stores decides what a retry sees. The rule, table-tested in
// TestStorable:
//
//	the work answered                 stored and replayed?   why
//	2xx                               yes, with its writes   the write happened
//	4xx Response, nil error           yes, with its writes   a refusal that must leave a trace
//	                                                         (an anomaly recorded for refund)
//	an error Reject renders as 4xx    yes, alone, after the  deterministic: out_of_stock,
//	(out_of_stock, illegal_state …)   rollback               illegal_state answer the same again
//	an error marked Conflict(err)     yes, alone, as a 409   deterministic: the work's own unique
//	(Reject declined it)              problem document       key or precondition refused it
//	401, 403, 408, 429                no                     about the caller or the moment
//	5xx, any other error, a panic,    no (rolled back)       nothing happened; a retry runs again
//	a cancelled context
//
// # When the database fails under the transaction
//
// Config.Classify (mysqlerr, pgerr, sqliteerr; the classes are idempotent/dberr's) tells the
// guard what a database error means. A transaction the database aborted (a deadlock, a Galera
// certification conflict) or could not serve (a Galera node not ready) is run again with
// backoff for Config.RetryFor, then answered ErrUnavailable (the database busy: nothing
// stored, retry later). A connection lost under a statement (dberr.ConnectionLost: reset,
// closed, timed out) is run again the same way — but one lost at the COMMIT is indefinite:
// the commit may have applied with its answer lost. The guard reads the record on another
// connection first (resolveCommit): found with this attempt's id, the attempt executed. Not
// found, the rerun is safe either way, for were the commit applied after all — the server may
// still have been applying it when the record was read — the rerun's record meets the
// committed one as a duplicate, which the guard knows by its id for this call's own: the call
// is answered executed, with the answer that attempt recorded. TestCommitAnswerLost cuts a
// real connection the moment its COMMIT went out, TestCommitLandsAfterItsAnswerWasLost lets
// the COMMIT land after the client gave up (a TCP proxy of the tests, internal/testnet).
package idempotent
