package chaos

import (
	"context"
	"database/sql"
	"fmt"

	_ "github.com/go-sql-driver/mysql" // the checker reads the private MariaDB directly

	"github.com/oncepay/oncepay/internal/account"
	"github.com/oncepay/oncepay/internal/inventory"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
)

// chaosNode is the snowflake node id of the chaos run's own writes (users); the instances
// use 1..3.
const chaosNode = 900

// user is one buyer of the workload.
type user struct {
	id     int64
	name   string
	apiKey string
}

// sku is one product of the workload with the stock it started with.
type sku struct {
	sku     string
	price   int64
	initial int64
}

// The workload's catalog: one SKU that sells out within a run (out_of_stock answers,
// contended rows), two that do not.
var chaosSKUs = []sku{
	{"CHAOS-SCARCE", 2999, 40},
	{"CHAOS-A", 1999, 100000},
	{"CHAOS-B", 49900, 100000},
}

// chaosUsers is how many buyers the workload has.
const chaosUsers = 12

// exec runs one statement against the private MariaDB (db "" = no default database).
func (w *world) exec(ctx context.Context, db, query string, args ...any) error {
	conn, err := sql.Open("mysql", w.mysqlDSN(db))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.ExecContext(ctx, query, args...)
	return err
}

// seed applies the migrations and creates the buyers and the catalog through oncepay's own
// stores, as the demo seed does.
func (w *world) seed(ctx context.Context) ([]user, error) {
	db, err := database.Open(database.Options{MySQLDSN: w.mysqlDSN("oncepay"), MaxOpenConns: 4})
	if err != nil {
		return nil, err
	}
	defer database.Close(db)
	if err := database.Migrate(ctx, db); err != nil {
		return nil, err
	}
	gen, err := ids.New(chaosNode)
	if err != nil {
		return nil, err
	}
	users := account.NewUsers(db, gen)
	var out []user
	for i := range chaosUsers {
		u := user{name: fmt.Sprintf("chaos-%02d", i+1), apiKey: "chaos-key-" + randomHex(16)}
		if u.id, err = users.Ensure(ctx, u.name, u.apiKey); err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	store := inventory.NewStore(db)
	for _, s := range chaosSKUs {
		if err := store.Ensure(ctx, inventory.Item{SKU: s.sku, Name: s.sku, Price: s.price, Available: s.initial}); err != nil {
			return nil, err
		}
	}
	return out, nil
}
