// Package frontend is the client-facing side of a node: the client API's
// gRPC service (NewService), each client connection and its sessions
// (Connections, connection.go), consumers and their attachments to their
// members' hosts (consumers.go, attachment.go), transacted sessions'
// frames (tx.go), the listing and destroying of connections (admin.go),
// and the client boundary's error table (WireError, errors.go).
//
// A consumer is attached to its member's host wherever that is: this
// node's replica (a local link, package member) or another node's over the
// peer service (Node.AttachRemote). When the host changes, the attachment
// links to the new one, which pushes what the old one committed and never
// pushed.
//
// What it needs of the node, it asks through Node and Admin, which package
// cluster implements: where a send goes and what happens when it fails is
// the router's (package destination), carried out by cluster. The
// decisions made here, with their reasons and measurements, are in
// DESIGN.md.
package frontend
