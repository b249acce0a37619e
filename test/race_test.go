//go:build race

package test

// The binary under test is built with -race too when the tests are, and a
// data race it reports fails the test that ran it.
func init() { raceEnabled = true }
