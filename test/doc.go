// Package test holds Cairn's multi-process tests: they build the real
// `cairn` binary once per run, start `cairn server` processes on loopback
// ports, drive them with the CLI and the Go client library, kill them with
// SIGKILL mid-stream, restart them on the same data directory, and check the
// history of every send, receive and acknowledgement against the promises of
// docs/ARCHITECTURE.md.
//
// Everything listens on 127.0.0.1, every server is stopped when its test
// ends (and killed with the test process, on Linux), and every wait is
// bounded. `go test -short` runs one crash cycle instead of two.
package test
