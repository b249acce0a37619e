// Package destination is the distributed-destination router: the policy
// that decides which member of a destination a send, a consumer or a move
// goes to, and what a send does when a try fails.
//
// It decides from a view of the members ([]Candidate: where each is
// hosted, whether it drains, how many messages wait, how many consumers
// it has) and does no I/O: the front-end (package cluster) builds the
// view, carries out each try, and tells the plan what the try learned.
//
//   - ForSend, ForConsumer, ForMove and Pin choose a member.
//   - DedupMember is the one member an idempotent send goes to, on every
//     node alike.
//   - SendPlan is one send's loop: which member each try goes to and,
//     from the try's Outcome, whether to stop, try another member at once,
//     or pause and try again.
//   - Outcome, ErrNotSent and ErrOutcomeUnknown are the vocabulary every
//     layer uses for what a try learned: stored, certainly not sent (safe
//     to send anywhere), or unknown (never sent to another member).
package destination
