package account_test

import (
	"log/slog"
	"os"
	"testing"

	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// TestMain keeps the log to warnings and errors: the storms answer thousands of requests,
// each of which logs a line at info level.
func TestMain(m *testing.M) {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	slog.Warn("account tests", "env", testenv.Describe())
	os.Exit(m.Run())
}
