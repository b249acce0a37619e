// Package certs makes and reads the certificates of a Cairn cluster, from
// Go's crypto alone (no openssl): a cluster CA, node certificates (for
// serving and for dialing other nodes, valid for the node's host names and
// addresses) and user certificates (client identities).
//
// Decision: every key is ECDSA P-256 and every certificate carries its
// identity twice, as its common name and as a URI (cairn://node/ID,
// cairn://user/NAME), which is what the servers read: a node's id must
// match the certificate it presents, and a user certificate cannot pass
// for a node's, nor a node's for a user's. Reason: P-256 is what every TLS
// stack in the clients' languages accepts and it signs fast; a URI names
// the kind of identity, which a common name alone does not. Trade-off: no
// RSA keys for stacks that still need them; an operator with a corporate
// PKI makes certificates there with the same URIs.
package certs
