// Package testsupport holds what the service's tests share, and nothing they test: testenv
// gives a test its real dependencies (a database of its own, an isolated Redis, a Kafka broker
// over TCP), and apptest starts an instance on them — the whole service, or a domain's
// database, Redis and router with the parts its test asks for — and drives it as users,
// channels and drills do.
package testsupport
