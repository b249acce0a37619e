// Package selector is the JMS message selector language: Parse turns a
// selector into a Selector, and Selector.Match tells whether a message's
// headers and properties satisfy it.
//
// The language is the SQL-92 subset of the JMS specification (3.8.1.1):
// literals (quoted strings with ” for a quote, exact and approximate
// numbers, TRUE, FALSE), identifiers naming a property or one of the
// headers JMSPriority, JMSMessageID, JMSTimestamp, JMSCorrelationID,
// JMSType and JMSDeliveryMode, the arithmetic operators + - * / with
// unary signs, the comparisons = <> < <= > >=, [NOT] BETWEEN, [NOT] IN with
// a list of strings, [NOT] LIKE with % and _ and an optional ESCAPE,
// IS [NOT] NULL, and NOT, AND, OR with parentheses. Keywords are not case
// sensitive; identifiers are.
//
// Decisions, and the reason for each:
//
//   - Three-valued logic. A missing property is NULL; arithmetic or a
//     comparison with NULL is unknown, and unknown combines by the
//     specification's tables (FALSE AND unknown is FALSE, TRUE OR unknown
//     is TRUE, NOT unknown is unknown). A message matches only when the
//     selector is TRUE.
//   - Values of unlike types compare as FALSE (a string property against a
//     number), as the specification says; numbers compare across int64
//     and float64 by promotion to float64, as Java does. Strings and
//     booleans compare only with = and <>: a selector that orders them is
//     refused when both sides are literals or one is, and is FALSE when the
//     types only meet at run time.
//   - Integer arithmetic wraps as Java's long does; an integer division by
//     zero is unknown (Java throws, and a selector cannot).
//   - What the grammar can check, Parse checks: LIKE, IN and IS NULL apply
//     to an identifier, IN lists and LIKE patterns are quoted strings, and
//     a literal of the wrong type where a boolean or a number is needed is
//     refused with the position of the offending token (1-based, counted in
//     characters). The error is an *Error that matches ErrInvalid.
//   - A selector is at most MaxLen bytes and nests at most MaxDepth deep, so
//     that a hostile selector costs bounded memory and stack; Match is
//     linear in the selector's size, and LIKE in the product of the
//     pattern's and the value's lengths, never exponential.
//
// Selector is pure: it reads no clock and keeps no state between calls, so
// the member state machines may evaluate it on every replica and get the
// same answer.
package selector
