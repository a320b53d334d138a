// Package idem is what is oncepay's own about the idempotency kit (idempotent/): the
// settings its HTTP adapter runs with (HTTP, AdminHTTP: whose keys, the contract's problems,
// Retry-After), the kit's Config wiring that knows oncepay's SQL dialects and problem format
// (Classify, StoredProblem), the marks that say, where a route is mounted, that it is
// idempotent (KeyRequired, ReportKeyed, Marks), the one-time token endpoint, the published
// policy and the admin's lookup and eviction of records (API).
//
// The folder is internal/idempotent, the design card's place for the service's side of the
// layer; the package is named idem so that a handler, which uses both, reads the kit as
// idempotent (idempotent.Work, idempotent.Respond) and the service's wiring as idem
// (idem.JSON, idem.KeyRequired) without renaming the kit. Import it by that name:
//
//	idem "github.com/oncepay/oncepay/internal/idempotent"
//
// Handlers call the kit's adapter, idempotent/httpkey, directly: there is no second adapter
// here, only its settings.
package idem
