// Package console is the web console every node serves at / on
// --http-addr: the cluster, its destinations with their members' counts
// (live, polled every 2 s), one destination's detail with a rate graph,
// and the client connections, with the actions an incident needs (purge a
// queue, destroy a connection) behind a confirmation. Plain HTML, CSS and
// JavaScript embedded in the binary: no build step, nothing fetched from
// another site.
//
// Decision: the console's JSON endpoints (/api/...) call the node's own
// client API, as the CLI does, with the browser's credentials, and answer
// the JSON the CLI's --json prints. Reason: one authorisation path (a
// user the console shows a queue to is one the CLI would), audited as
// any client call, and shapes scripts already know. Trade-off: a gRPC
// call per request, to the node itself.
//
// Decision: with TLS on, the console asks for a user and password with
// HTTP Basic authentication (over HTTPS) and passes them on; without TLS
// the node is open and every page says so. Its actions are POSTs that
// must carry the X-Cairn-Console header, which a page of another site
// cannot send without a CORS preflight the console never grants: a
// browser's cached credentials cannot be used against it from elsewhere.
//
// Decision: every request's Host must be an IP address, localhost, or one
// of the node's names (Config.Hosts: its id, --advertise, hostname,
// certificate names, --console-host). Reason: DNS rebinding makes a page
// of another site same-origin with the console (Host and Origin both the
// page's name), which the header and Origin checks cannot tell apart.
// Trade-off: a name in front of the node (an ingress) needs --console-host.
package console
