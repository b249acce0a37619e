// Package auth says who calls a node's client API and what they may do:
// it authenticates a call by the user and password it carries (gRPC
// metadata, "authorization: Basic") or by the client certificate its TLS
// connection showed, and authorises it against the user's grants, which
// the meta group holds (fsm/meta_users.go).
//
// Decision: authentication is on exactly when TLS is (cluster/tls.go):
// a password never crosses the network in clear, and a node started
// without TLS (make run, cairn server --dev) stays open, saying so when
// it starts. Reason: a half-secured mode (passwords in clear) protects
// nothing on the networks Cairn's operators run; a first try should not
// need certificates. Trade-off: an operator cannot require passwords
// without TLS.
//
// Decision: every unary call is checked here, by a table of what each
// method needs (an unknown method needs admin); a Connect stream is
// authenticated when it opens, and each of its sends and consumers is
// authorised by the front-end (frontend.Node.Authorize) against the
// user's grants as the meta group holds them then, so a grant taken
// away applies to open connections at once.
//
// Decision: passwords are stored as bcrypt hashes, and a node stays
// responsive while it checks them (passwords.go): a check's verdict,
// right or wrong, is remembered under the hash it was made against, so a
// client that logs in again, or retries a stale password in a loop, costs
// no bcrypt; and at most half the cores run bcrypt at once. Trade-off: a
// burst of new passwords waits its turn, up to its call's deadline.
package auth
