package lab

import (
	"github.com/go-chi/chi/v5"

	"github.com/oncepay/oncepay/internal/app"
)

// Mount mounts the replicas under /lab on a's router when ONCEPAY_LAB=true: the hook of the
// lab's build (tools/oncepay-lab), app.Deps{Routes: lab.Mount}. The service's own binary,
// bin/oncepay, never carries them.
func Mount(a *app.App, r chi.Router) {
	if !a.Config.Lab {
		return
	}
	l := New(a.DB, a.Redis.Client, a.Config.RedisPrefix, a.IDs, a.Orders(), a.Config.ChannelSecret, a.Config.ChaosPaymentDelay)
	// I18's lossy network forwards to the instance's own routes.
	l.upstream = r
	r.Mount("/lab", l.Routes(a.RequireUser(), a.RequireAdmin()))
}
