package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/idempotency"
	fiberredis "github.com/gofiber/storage/redis/v3"
)

// fiberOrders is the baseline's POST /orders as a gofiber handler.
func fiberOrders(o *orders) fiber.Handler {
	return func(c fiber.Ctx) error {
		_ = c.Body()
		body, err := o.placeInTx(c.Context())
		c.Set("Content-Type", "application/json")
		switch {
		case errors.Is(err, errOutOfStock):
			return c.Status(http.StatusConflict).Send(errorJSON("out_of_stock"))
		case err != nil:
			return c.Status(http.StatusInternalServerError).Send(errorJSON("internal"))
		}
		return c.Status(http.StatusCreated).Send(body)
	}
}

// newFiberApp returns a gofiber app with GET /ping and POST /orders; with storage set, the
// orders route is behind gofiber's idempotency middleware keyed by Idempotency-Key.
func newFiberApp(o *orders, storage fiber.Storage) *fiber.App {
	app := fiber.New()
	app.Get("/ping", func(c fiber.Ctx) error { return c.SendStatus(http.StatusOK) })
	if storage != nil {
		app.Use(markReplays)
		app.Use(idempotency.New(idempotency.Config{KeyHeader: headerKey, Storage: storage}))
	}
	app.Post("/orders", fiberOrders(o))
	return app
}

// markReplays sets Idempotent-Replayed on the answers the middleware served from its
// storage, so that the load generator can check that a replay was one. gofiber itself says
// so only in the request's locals.
func markReplays(c fiber.Ctx) error {
	err := c.Next()
	if idempotency.IsFromCache(c) {
		c.Set(headerReplayed, "true")
	}
	return err
}

// newFiberStorage returns gofiber's Redis storage on a client of its own (oncepay's client
// options), with every key under prefix.
func (e *env) newFiberStorage(prefix string) fiber.Storage {
	rdb := newRedisClient(e.redisAddr)
	e.defer1(func() { _ = rdb.Close() })
	return &prefixStorage{Storage: fiberredis.NewFromConnection(rdb), prefix: prefix}
}

// serveFiber serves app on a random port of 127.0.0.1 and returns its base URL and the
// function that stops it.
func (e *env) serveFiber(app *fiber.App) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	go func() { _ = app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true}) }()
	stop = func() { _ = app.ShutdownWithTimeout(5 * time.Second) }
	return "http://" + ln.Addr().String(), stop, nil
}

// prefixStorage puts every key of a gofiber storage under a prefix, so that the bench can
// delete its keys and nothing else. Reset deletes only the prefixed keys.
type prefixStorage struct {
	*fiberredis.Storage
	prefix string
}

// GetWithContext reads key under the prefix.
func (s *prefixStorage) GetWithContext(ctx context.Context, key string) ([]byte, error) {
	return s.Storage.GetWithContext(ctx, s.prefix+key)
}

// Get reads key under the prefix.
func (s *prefixStorage) Get(key string) ([]byte, error) { return s.Storage.Get(s.prefix + key) }

// SetWithContext writes key under the prefix.
func (s *prefixStorage) SetWithContext(ctx context.Context, key string, val []byte, exp time.Duration) error {
	return s.Storage.SetWithContext(ctx, s.prefix+key, val, exp)
}

// Set writes key under the prefix.
func (s *prefixStorage) Set(key string, val []byte, exp time.Duration) error {
	return s.Storage.Set(s.prefix+key, val, exp)
}

// DeleteWithContext deletes key under the prefix.
func (s *prefixStorage) DeleteWithContext(ctx context.Context, key string) error {
	return s.Storage.DeleteWithContext(ctx, s.prefix+key)
}

// Delete deletes key under the prefix.
func (s *prefixStorage) Delete(key string) error { return s.Storage.Delete(s.prefix + key) }

// ResetWithContext deletes the keys under the prefix, never the whole Redis database.
func (s *prefixStorage) ResetWithContext(ctx context.Context) error {
	iter := s.Conn().Scan(ctx, 0, s.prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		if err := s.Conn().Del(ctx, iter.Val()).Err(); err != nil {
			return err
		}
	}
	return iter.Err()
}

// Reset deletes the keys under the prefix.
func (s *prefixStorage) Reset() error { return s.ResetWithContext(context.Background()) }

// Close leaves the client open: the environment closes it.
func (s *prefixStorage) Close() error { return nil }
