package app

import (
	"context"

	"github.com/oncepay/oncepay/internal/inventory"
)

// DemoUsers are the demo users and their API keys (docs/contract.md, demo data).
var DemoUsers = []struct{ Name, APIKey string }{
	{"alice", "demo-alice-key"},
	{"bob", "demo-bob-key"},
}

// DemoSKUs are the demo catalog (docs/contract.md, demo data).
var DemoSKUs = []inventory.Item{
	{SKU: "SKU-1001", Name: "Mechanical keyboard", Price: 49900, Available: 100},
	{SKU: "SKU-1002", Name: "USB-C cable", Price: 1999, Available: 1000},
	{SKU: "SKU-1003", Name: "Noise-cancelling headphones", Price: 89900, Available: 5},
}

// seedDemo creates the demo users and SKUs unless they exist. Every insert tolerates a
// conflict, so it is safe on every start and from several instances at once.
func (a *App) seedDemo(ctx context.Context) error {
	for _, u := range DemoUsers {
		if _, err := a.users.Ensure(ctx, u.Name, u.APIKey); err != nil {
			return err
		}
	}
	for _, it := range DemoSKUs {
		if err := a.inventory.Ensure(ctx, it); err != nil {
			return err
		}
	}
	return nil
}
