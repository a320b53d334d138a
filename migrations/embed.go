// Package migrations embeds oncepay's schema, one set of goose migrations per SQL dialect.
// Both sets must describe the same tables, columns and unique indexes; a test in
// internal/platform/database compares them on a real MySQL and on SQLite.
package migrations

import "embed"

// MySQL holds the migrations for MySQL 8 and MariaDB, under mysql/.
//
//go:embed mysql/*.sql
var MySQL embed.FS

// SQLite holds the migrations for the embedded SQLite database, under sqlite/.
//
//go:embed sqlite/*.sql
var SQLite embed.FS
