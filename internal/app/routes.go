package app

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/oncepay/oncepay/internal/inventory"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// routes is oncepay's URL map, in one place. Every write route states how it is idempotent:
// naturally (absolute values), conditionally (state preconditions) or forced (an
// Idempotency-Key or a business key through internal/idempotent).
func (a *App) routes(metrics *web.Metrics) http.Handler {
	r := chi.NewRouter()
	r.Use(web.RequestID, metrics.Middleware, web.Recover, web.LimitBody)
	r.NotFound(web.NotFound)
	r.MethodNotAllowed(web.MethodNotAllowed)

	r.Get("/healthz", a.healthz)
	r.Get("/readyz", a.readyz)
	r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(a.Registry, promhttp.HandlerOpts{}))

	inv := inventory.NewHandler(a.inventory)
	r.Route("/v1", func(r chi.Router) {
		// Reading stock is public and naturally idempotent.
		r.Mount("/inventory", inv.Routes())

		// One-time tokens for forms (I7): a token is the Idempotency-Key of one submission.
		r.With(web.RequireUser(a.users)).Post("/idempotency-tokens", a.Guard.TokenHandler(web.UserScope))

		r.Route("/admin", func(r chi.Router) {
			r.Use(web.RequireAdmin(a.Config.AdminKey, a.users))
			r.Mount("/inventory", inv.AdminRoutes())
			r.Get("/anomalies", a.anomalies.ListHandler)
		})
	})
	return r
}
