package selector

import (
	"cmp"
	"fmt"
	"slices"
)

// Fields gives a header's or property's value by name; NULL (the zero
// Value) when the message has none of that name.
type Fields func(name string) Value

// Match reports whether the message whose fields get reads satisfies the
// selector: the selector is TRUE (FALSE and unknown do not match). The nil
// Selector matches every message.
func (s *Selector) Match(get Fields) bool {
	if s == nil {
		return true
	}
	return s.root.eval(get).Bool()
}

func (e *expr) eval(get Fields) Value {
	switch e.op {
	case opLit:
		return e.val
	case opIdent:
		return get(e.name)
	case opNeg:
		x := e.kids[0].eval(get)
		switch x.kind {
		case Int:
			return IntValue(-x.i)
		case Float:
			return FloatValue(-x.f)
		}
		return unknown
	case opAdd, opSub, opMul, opDiv:
		return arith(e.op, e.kids[0].eval(get), e.kids[1].eval(get))
	case opEq, opNe, opLt, opLe, opGt, opGe:
		return compare(e.op, e.kids[0].eval(get), e.kids[1].eval(get))
	case opBetween:
		x := e.kids[0].eval(get)
		in := and(compare(opGe, x, e.kids[1].eval(get)), func() Value { return compare(opLe, x, e.kids[2].eval(get)) })
		return negateIf(e.not, in)
	case opIn:
		x := e.kids[0].eval(get)
		if x.kind == Null {
			return unknown
		}
		return negateIf(e.not, truth(x.kind == String && slices.Contains(e.list, x.s)))
	case opLike:
		x := e.kids[0].eval(get)
		if x.kind == Null {
			return unknown
		}
		return negateIf(e.not, truth(x.kind == String && e.like.match(x.s)))
	case opIsNull:
		return truth(e.kids[0].eval(get).kind == Null != e.not)
	case opNot:
		return negateIf(true, e.kids[0].eval(get))
	case opAnd:
		return and(e.kids[0].eval(get), func() Value { return e.kids[1].eval(get) })
	case opOr:
		l := e.kids[0].eval(get)
		if l.Bool() {
			return l
		}
		r := e.kids[1].eval(get)
		if r.Bool() {
			return r
		}
		if l.kind == Bool && r.kind == Bool {
			return truth(false)
		}
		return unknown
	}
	panic(fmt.Sprintf("selector: unknown operator %d", e.op))
}

// and is the three-valued AND; r is evaluated only when l is not FALSE. A
// value that is not a boolean counts as unknown.
func and(l Value, r func() Value) Value {
	if l.kind == Bool && !l.Bool() {
		return l
	}
	rv := r()
	if rv.kind == Bool && !rv.Bool() {
		return rv
	}
	if l.kind == Bool && rv.kind == Bool {
		return truth(true)
	}
	return unknown
}

// negateIf is NOT when neg: NOT unknown is unknown.
func negateIf(neg bool, v Value) Value {
	if v.kind != Bool {
		return unknown
	}
	if neg {
		return truth(!v.Bool())
	}
	return v
}

// arith applies + - * / with Java's promotion: two integers give an
// integer (wrapping, truncating division), anything with a float a float.
func arith(o op, a, b Value) Value {
	if !a.numeric() || !b.numeric() {
		return unknown
	}
	if a.kind == Int && b.kind == Int {
		switch o {
		case opAdd:
			return IntValue(a.i + b.i)
		case opSub:
			return IntValue(a.i - b.i)
		case opMul:
			return IntValue(a.i * b.i)
		}
		if b.i == 0 {
			return unknown
		}
		return IntValue(a.i / b.i)
	}
	x, y := a.asFloat(), b.asFloat()
	switch o {
	case opAdd:
		return FloatValue(x + y)
	case opSub:
		return FloatValue(x - y)
	case opMul:
		return FloatValue(x * y)
	}
	return FloatValue(x / y)
}

// compare is a comparison: unknown with NULL, FALSE between unlike types
// and for an ordering of strings or booleans.
func compare(o op, a, b Value) Value {
	if a.kind == Null || b.kind == Null {
		return unknown
	}
	var c int
	switch {
	case a.numeric() && b.numeric():
		if a.kind == Int && b.kind == Int {
			c = cmp.Compare(a.i, b.i)
		} else {
			x, y := a.asFloat(), b.asFloat()
			if x != x || y != y { // NaN equals nothing and orders with nothing
				return truth(o == opNe)
			}
			c = cmp.Compare(x, y)
		}
	case a.kind != b.kind:
		return truth(false)
	case o != opEq && o != opNe:
		return truth(false)
	case a.kind == String:
		c = cmp.Compare(a.s, b.s)
	default:
		c = cmp.Compare(a.i, b.i)
	}
	switch o {
	case opEq:
		return truth(c == 0)
	case opNe:
		return truth(c != 0)
	case opLt:
		return truth(c < 0)
	case opLe:
		return truth(c <= 0)
	case opGt:
		return truth(c > 0)
	}
	return truth(c >= 0)
}
