package app

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/oncepay/oncepay/internal/account"
	"github.com/oncepay/oncepay/internal/explain"
	idem "github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/inventory"
	"github.com/oncepay/oncepay/internal/jobs"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/payment"
	"github.com/oncepay/oncepay/internal/platform/web"
	"github.com/oncepay/oncepay/internal/refund"
	"github.com/oncepay/oncepay/internal/webhook"
)

// routes is oncepay's URL map, in one place. Every write route states how it is idempotent:
// naturally (absolute values), conditionally (state preconditions) or forced — an
// Idempotency-Key or a report's own number — which the route says once, with a mark where it
// is mounted (idem.KeyRequired, idem.ReportKeyed). Every other fact of an idempotent route is
// read from its mark: the rejected outcome of its early refusals, the policy's required_on,
// the check of api/openapi.yaml; a test fails for a write route with no mark and no reason.
func (a *App) routes(metrics *web.Metrics) http.Handler {
	r := chi.NewRouter()
	// The idempotent routes, read from their marks once every route below is mounted.
	marks := new(idem.Marks)
	// Every GET answers HEAD too (load balancers probe /healthz with HEAD): chi's GetHead
	// routes a HEAD the router has no route for to the GET handler, which writes no body.
	// marks.MarkRejected gives the refusals on an idempotent route's path that come before
	// its key is read — 401, 405, 413 — Idempotency-Outcome: rejected.
	r.Use(web.RequestID, marks.MarkRejected, metrics.Middleware, web.Recover, web.LimitBody, middleware.GetHead)
	r.NotFound(web.NotFound)
	r.MethodNotAllowed(web.MethodNotAllowed)

	r.Get("/healthz", a.healthz)
	r.Get("/readyz", a.readyz)
	r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(a.Registry, promhttp.HandlerOpts{}))

	inv := inventory.NewHandler(a.inventory)
	orders := order.NewHandler(a.orders, a.idem, a.trades)
	trades := payment.NewTradeHandler(a.trades, a.idem)
	refunds := refund.NewHandler(a.refunds, a.idem)
	books := ledger.New(a.IDs)
	jobRuns := jobs.NewHandler(a.orders, a.Guard, a.Config.DedupRetention, jobs.Channel{Trades: a.trades, Refunds: a.refunds, Bills: a.bills},
		func(ctx context.Context) (int64, error) { return books.Backfill(ctx, a.DB) })
	accounts := account.NewHandler(a.recharges, a.users, a.idem)
	idemAPI := idem.NewAPI(a.Guard, marks, a.Registry)
	channels := make([]string, len(a.Config.Channels))
	for i, c := range a.Config.Channels {
		channels[i] = c.Name
	}
	explainer := explain.New(a.DB, a.Guard, channels)
	hooks := webhook.NewHandler(a.DB, a.IDs, a.endpoints, a.adminIdem, a.webhookPolicy, a.Config.WebhookRotationGrace)
	r.Route("/v1", func(r chi.Router) {
		// Reading stock is public and naturally idempotent.
		r.Mount("/inventory", inv.Routes())

		// The published idempotency policy (IETF Idempotency-Key draft): public, a read.
		r.Get("/idempotency-policy", idemAPI.PolicyHandler)

		// One-time tokens for forms (I7): a token is the Idempotency-Key of one submission.
		r.With(web.RequireUser(a.users)).Post("/idempotency-tokens", idemAPI.TokenHandler)

		// Orders: create and cancel need an Idempotency-Key; get is naturally idempotent.
		r.With(web.RequireUser(a.users)).Mount("/orders", orders.Routes())
		// Paying and refunding an order talk to the channel: both need an Idempotency-Key;
		// the channel is called outside the transaction, by the same number on every retry
		// (I8), and a refund is a committed PENDING row before it is a call.
		r.With(web.RequireUser(a.users)).Method(http.MethodPost, "/orders/{order_id}/payments", idem.KeyRequired(a.idem, trades.Pay))
		r.With(web.RequireUser(a.users)).Method(http.MethodPost, "/orders/{order_id}/refunds", idem.KeyRequired(a.idem, refunds.Create))

		// Channel reports, one inbound port (internal/notify): signed by their configured
		// channel with a timestamp and their kind, keyed by channel + trade_no (refunds:
		// refund_no), whichever route, or the Kafka topic, they arrive by.
		r.Method(http.MethodPost, "/payments/notify", idem.ReportKeyed(a.Reports.Handler(notify.Trade)))
		// Reading a refund is the owner's, naturally idempotent.
		r.Mount("/refunds", refunds.Routes(web.RequireUser(a.users), a.Reports.Handler(notify.Refund)))

		// Recharges (I2): create needs an Idempotency-Key; the channel's report credits once
		// (state precondition, claimed trade number, ledger unique key).
		r.Mount("/recharges", accounts.RechargeRoutes(a.Reports.Handler(notify.Recharge)))
		// The caller's balance is a read: naturally idempotent.
		r.Mount("/accounts", accounts.AccountRoutes())

		r.Route("/admin", func(r chi.Router) {
			r.Use(web.RequireAdmin(a.Config.AdminKey, a.users))
			r.Mount("/inventory", inv.AdminRoutes())
			r.Get("/anomalies", a.anomalies.ListHandler)
			// The books (internal/ledger): balances, postings, transfers and their check.
			r.Mount("/ledger", ledger.Routes(a.DB))
			// An idempotency key's dedup record, and the eviction of a stored 4xx so that the
			// next attempt runs again; a stored success is never evicted (effect_committed).
			r.Get("/idempotency-records", idemAPI.Lookup)
			r.Delete("/idempotency-records", idemAPI.Evict)
			// One write across the whole chain (internal/explain): from a key, an order, a trade
			// number or a refund, every layer's rows and one timeline; as JSON and as a page.
			r.Get("/explain", explainer.Handler)
			r.Get("/explain/page", explainer.Page)
			// Jobs on demand: safe at any time, their changes carry state preconditions.
			r.Mount("/jobs", jobRuns.AdminRoutes())
			// Webhooks: the merchant's endpoints, their delivery log and redelivery (rotating
			// a secret and redelivering need an Idempotency-Key), and the events feed.
			r.Mount("/webhook-endpoints", hooks.Routes())
			r.Get("/events", a.feed.ListHandler)
		})
	})
	// Routes of another build beside the API — the training kit's lab replicas, in the lab's
	// own build; bin/oncepay has none.
	if a.extra != nil {
		a.extra(a, r)
	}
	// Every route is mounted: read their marks.
	marks.Collect(r)
	return r
}

// RequireUser and RequireAdmin are the instance's authentication middlewares, for routes of
// another build (Deps.Routes).
func (a *App) RequireUser() func(http.Handler) http.Handler { return web.RequireUser(a.users) }

// RequireAdmin is the admin key's middleware (see RequireUser).
func (a *App) RequireAdmin() func(http.Handler) http.Handler {
	return web.RequireAdmin(a.Config.AdminKey, a.users)
}

// Orders is the instance's order service, for routes of another build (Deps.Routes).
func (a *App) Orders() *order.Service { return a.orders }
