package selector

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxLen is the longest selector Parse takes, in bytes; MaxDepth how deep
// its expressions nest.
const (
	MaxLen   = 4096
	MaxDepth = 64
)

// Selector is a parsed message selector. The nil *Selector selects every
// message (an empty selector is none, as the specification says).
type Selector struct {
	src  string
	root *expr
}

// Parse parses a selector; an empty or blank one gives nil, which matches
// every message. A refused selector gives an *Error (errors.Is ErrInvalid).
func Parse(src string) (*Selector, error) {
	if len(src) > MaxLen {
		return nil, &Error{Pos: 1, Msg: fmt.Sprintf("the selector is %d bytes long, over the limit of %d", len(src), MaxLen)}
	}
	if strings.TrimSpace(src) == "" {
		return nil, nil
	}
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	root, err := p.or()
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tEOF {
		return nil, p.errAt(t, "expected an operator or the end, found %s", t)
	}
	if root.typ != tyBool && root.typ != tyAny {
		return nil, &Error{Pos: root.pos, Msg: fmt.Sprintf("a selector is a condition, and this is a %s", root.typ)}
	}
	return &Selector{src: src, root: root}, nil
}

// String is the selector as it was given ("" for nil).
func (s *Selector) String() string {
	if s == nil {
		return ""
	}
	return s.src
}

type staticType uint8

const (
	tyAny  staticType = iota // an identifier: known at run time
	tyBool                   // a condition or a boolean literal
	tyNum
	tyStr
)

func (t staticType) String() string {
	return [...]string{"value", "condition", "number", "string"}[t]
}

type op uint8

const (
	opLit op = iota
	opIdent
	opNeg
	opAdd
	opSub
	opMul
	opDiv
	opEq
	opNe
	opLt
	opLe
	opGt
	opGe
	opBetween
	opIn
	opLike
	opIsNull
	opNot
	opAnd
	opOr
)

// expr is a node of a parsed selector.
type expr struct {
	op   op
	typ  staticType
	pos  int
	not  bool // NOT BETWEEN, NOT IN, NOT LIKE, IS NOT NULL
	val  Value
	name string
	kids []*expr
	list []string // IN
	like pattern
}

var (
	compareOps = map[string]op{"=": opEq, "<>": opNe, "<": opLt, "<=": opLe, ">": opGt, ">=": opGe}
	addOps     = map[string]op{"+": opAdd, "-": opSub}
	mulOps     = map[string]op{"*": opMul, "/": opDiv}
	// predicateWords may follow an arithmetic expression in a predicate.
	predicateWords = map[string]bool{"NOT": true, "BETWEEN": true, "IN": true, "LIKE": true, "IS": true}
)

type parser struct {
	toks  []token
	i     int
	depth int
}

func (p *parser) peek() token { return p.toks[p.i] }
func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

// accept consumes the next token if it is the keyword or operator text.
func (p *parser) accept(text string) bool {
	if t := p.peek(); (t.kind == tKeyword || t.kind == tOp) && t.text == text {
		p.i++
		return true
	}
	return false
}

func (p *parser) errAt(t token, format string, args ...any) error {
	return &Error{Pos: t.pos, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) expect(text string) error {
	if !p.accept(text) {
		t := p.peek()
		return p.errAt(t, "expected %s, found %s", text, t)
	}
	return nil
}

// enter bounds how deep a selector nests, so that a hostile one cannot
// exhaust the stack.
func (p *parser) enter(t token) error {
	p.depth++
	if p.depth > MaxDepth {
		return p.errAt(t, "the selector nests more than %d deep", MaxDepth)
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

// want checks that e may stand where a value of type t is needed.
func want(e *expr, t staticType, where string) error {
	if e.typ == tyAny || e.typ == t {
		return nil
	}
	return &Error{Pos: e.pos, Msg: fmt.Sprintf("%s needs a %s, and this is a %s", where, t, e.typ)}
}

func (p *parser) or() (*expr, error) {
	return p.logic("OR", opOr, p.and)
}

func (p *parser) and() (*expr, error) {
	return p.logic("AND", opAnd, p.not)
}

func (p *parser) logic(word string, o op, operand func() (*expr, error)) (*expr, error) {
	l, err := operand()
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		if !p.accept(word) {
			return l, nil
		}
		r, err := operand()
		if err != nil {
			return nil, err
		}
		for _, e := range []*expr{l, r} {
			if err := want(e, tyBool, word); err != nil {
				return nil, err
			}
		}
		l = &expr{op: o, typ: tyBool, pos: t.pos, kids: []*expr{l, r}}
	}
}

func (p *parser) not() (*expr, error) {
	t := p.peek()
	if !p.accept("NOT") {
		return p.predicate()
	}
	if err := p.enter(t); err != nil {
		return nil, err
	}
	defer p.leave()
	x, err := p.not()
	if err != nil {
		return nil, err
	}
	if err := want(x, tyBool, "NOT"); err != nil {
		return nil, err
	}
	return &expr{op: opNot, typ: tyBool, pos: t.pos, kids: []*expr{x}}, nil
}

// predicate is a comparison, BETWEEN, IN, LIKE, IS NULL, or an arithmetic
// expression alone.
func (p *parser) predicate() (*expr, error) {
	x, err := p.additive()
	if err != nil {
		return nil, err
	}
	t := p.peek()
	if o, ok := compareOps[t.text]; ok && t.kind == tOp {
		p.next()
		y, err := p.additive()
		if err != nil {
			return nil, err
		}
		if o != opEq && o != opNe {
			for _, e := range []*expr{x, y} {
				if e.typ == tyStr || e.typ == tyBool {
					return nil, &Error{Pos: e.pos, Msg: fmt.Sprintf("a %s compares only with = and <>, not %s", e.typ, t.text)}
				}
			}
		}
		return &expr{op: o, typ: tyBool, pos: t.pos, kids: []*expr{x, y}}, nil
	}
	if t.kind != tKeyword || !predicateWords[t.text] {
		return x, nil
	}
	p.next()
	not := t.text == "NOT"
	if not {
		if n := p.peek(); n.kind != tKeyword || (n.text != "BETWEEN" && n.text != "IN" && n.text != "LIKE") {
			return nil, p.errAt(n, "expected BETWEEN, IN or LIKE after NOT, found %s", n)
		}
		t = p.next()
	}
	switch t.text {
	case "BETWEEN":
		return p.between(x, t, not)
	case "IN":
		return p.in(x, t, not)
	case "LIKE":
		return p.likeExpr(x, t, not)
	}
	// IS [NOT] NULL
	not = p.accept("NOT")
	if err := p.expect("NULL"); err != nil {
		return nil, err
	}
	if x.op != opIdent {
		return nil, &Error{Pos: x.pos, Msg: "IS NULL applies to a header or property name"}
	}
	return &expr{op: opIsNull, typ: tyBool, pos: t.pos, not: not, kids: []*expr{x}}, nil
}

func (p *parser) between(x *expr, kw token, not bool) (*expr, error) {
	lo, err := p.additive()
	if err != nil {
		return nil, err
	}
	if err := p.expect("AND"); err != nil {
		return nil, err
	}
	hi, err := p.additive()
	if err != nil {
		return nil, err
	}
	for _, e := range []*expr{x, lo, hi} {
		if err := want(e, tyNum, "BETWEEN"); err != nil {
			return nil, err
		}
	}
	return &expr{op: opBetween, typ: tyBool, pos: kw.pos, not: not, kids: []*expr{x, lo, hi}}, nil
}

func (p *parser) in(x *expr, kw token, not bool) (*expr, error) {
	if x.op != opIdent {
		return nil, &Error{Pos: x.pos, Msg: "IN applies to a header or property name"}
	}
	if err := p.expect("("); err != nil {
		return nil, err
	}
	e := &expr{op: opIn, typ: tyBool, pos: kw.pos, not: not, kids: []*expr{x}}
	for {
		t := p.next()
		if t.kind != tString {
			return nil, p.errAt(t, "IN takes a list of quoted strings, found %s", t)
		}
		e.list = append(e.list, t.text)
		if p.accept(")") {
			return e, nil
		}
		if err := p.expect(","); err != nil {
			return nil, err
		}
	}
}

func (p *parser) likeExpr(x *expr, kw token, not bool) (*expr, error) {
	if x.op != opIdent {
		return nil, &Error{Pos: x.pos, Msg: "LIKE applies to a header or property name"}
	}
	pt := p.next()
	if pt.kind != tString {
		return nil, p.errAt(pt, "LIKE takes a quoted pattern, found %s", pt)
	}
	escape := rune(-1)
	if p.accept("ESCAPE") {
		et := p.next()
		if et.kind != tString || utf8.RuneCountInString(et.text) != 1 {
			return nil, p.errAt(et, "ESCAPE takes one quoted character, found %s", et)
		}
		escape, _ = utf8.DecodeRuneInString(et.text)
	}
	pat, err := compileLike(pt.text, escape)
	if err != nil {
		return nil, p.errAt(pt, "%s", err)
	}
	return &expr{op: opLike, typ: tyBool, pos: kw.pos, not: not, kids: []*expr{x}, like: pat}, nil
}

func (p *parser) additive() (*expr, error) {
	return p.arith(addOps, p.multiplicative)
}

func (p *parser) multiplicative() (*expr, error) {
	return p.arith(mulOps, p.unary)
}

func (p *parser) arith(ops map[string]op, operand func() (*expr, error)) (*expr, error) {
	l, err := operand()
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		o, ok := ops[t.text]
		if !ok || t.kind != tOp {
			return l, nil
		}
		p.next()
		r, err := operand()
		if err != nil {
			return nil, err
		}
		for _, e := range []*expr{l, r} {
			if err := want(e, tyNum, "arithmetic"); err != nil {
				return nil, err
			}
		}
		l = &expr{op: o, typ: tyNum, pos: t.pos, kids: []*expr{l, r}}
	}
}

func (p *parser) unary() (*expr, error) {
	t := p.peek()
	if t.kind != tOp || (t.text != "-" && t.text != "+") {
		return p.primary()
	}
	p.next()
	if n := p.peek(); n.kind == tInt || n.kind == tFloat {
		// A signed literal is one number, so that the smallest int64 reads.
		p.next()
		v, err := number(n, t.text == "-")
		if err != nil {
			return nil, err
		}
		return &expr{op: opLit, typ: tyNum, pos: t.pos, val: v}, nil
	}
	if err := p.enter(t); err != nil {
		return nil, err
	}
	defer p.leave()
	x, err := p.unary()
	if err != nil {
		return nil, err
	}
	if err := want(x, tyNum, "a sign"); err != nil {
		return nil, err
	}
	if t.text == "+" {
		return x, nil
	}
	return &expr{op: opNeg, typ: tyNum, pos: t.pos, kids: []*expr{x}}, nil
}

func (p *parser) primary() (*expr, error) {
	t := p.next()
	switch t.kind {
	case tIdent:
		return &expr{op: opIdent, typ: tyAny, pos: t.pos, name: t.text}, nil
	case tString:
		return &expr{op: opLit, typ: tyStr, pos: t.pos, val: StringValue(t.text)}, nil
	case tInt, tFloat:
		v, err := number(t, false)
		if err != nil {
			return nil, err
		}
		return &expr{op: opLit, typ: tyNum, pos: t.pos, val: v}, nil
	case tKeyword:
		switch t.text {
		case "TRUE", "FALSE":
			return &expr{op: opLit, typ: tyBool, pos: t.pos, val: BoolValue(t.text == "TRUE")}, nil
		case "NULL":
			return nil, p.errAt(t, "NULL is written only in IS NULL and IS NOT NULL")
		}
	case tOp:
		if t.text == "(" {
			if err := p.enter(t); err != nil {
				return nil, err
			}
			defer p.leave()
			x, err := p.or()
			if err != nil {
				return nil, err
			}
			if err := p.expect(")"); err != nil {
				return nil, err
			}
			return x, nil
		}
	}
	return nil, p.errAt(t, "expected a value, a name or (, found %s", t)
}
