package selector

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ErrInvalid matches every error Parse returns (errors.Is).
var ErrInvalid = errors.New("invalid selector")

// Error is a selector Parse refused: what is wrong, and where.
type Error struct {
	// Pos is the 1-based position, in characters, of the token at fault
	// (one past the end for a selector that ends too soon).
	Pos int
	Msg string
}

func (e *Error) Error() string {
	return fmt.Sprintf("invalid selector at position %d: %s", e.Pos, e.Msg)
}

// Is makes an *Error match ErrInvalid.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

type tokKind uint8

const (
	tEOF tokKind = iota
	tIdent
	tString
	tInt
	tFloat
	tOp      // = <> < <= > >= + - * / ( ) ,
	tKeyword // AND OR NOT BETWEEN LIKE IN IS NULL ESCAPE TRUE FALSE
)

type token struct {
	kind tokKind
	text string // the operator, the upper-cased keyword, the identifier, the unquoted string, the number's digits
	pos  int    // 1-based character position
}

func (t token) String() string {
	switch t.kind {
	case tEOF:
		return "the end of the selector"
	case tString:
		return "'" + quote(t.text) + "'"
	case tKeyword:
		return t.text
	}
	return fmt.Sprintf("%q", t.text)
}

var keywords = map[string]bool{
	"AND": true, "OR": true, "NOT": true, "BETWEEN": true, "LIKE": true, "IN": true,
	"IS": true, "NULL": true, "ESCAPE": true, "TRUE": true, "FALSE": true,
}

// lex splits src into tokens, the last one tEOF.
func lex(src string) ([]token, error) {
	pos := 1
	for i, r := range src {
		if _, w := utf8.DecodeRuneInString(src[i:]); r == utf8.RuneError && w == 1 {
			return nil, &Error{Pos: pos, Msg: "the selector is not valid UTF-8"}
		}
		pos++
	}
	l := &lexer{src: src, pos: 1}
	for l.i < len(src) {
		r, w := utf8.DecodeRuneInString(src[l.i:])
		var err error
		switch {
		case unicode.IsSpace(r):
			l.i += w
			l.pos++
		case r == '\'':
			err = l.quoted()
		case r >= '0' && r <= '9' || r == '.' && l.i+1 < len(src) && isDigit(src[l.i+1]):
			err = l.number()
		case isIdentStart(r):
			l.word()
		default:
			err = l.operator(r)
		}
		if err != nil {
			return nil, err
		}
	}
	return append(l.toks, token{kind: tEOF, pos: l.pos}), nil
}

// lexer is lex's place in src: byte i, character pos (1-based).
type lexer struct {
	src  string
	i    int
	pos  int
	toks []token
}

// ascii advances over n bytes of ASCII.
func (l *lexer) ascii(n int) {
	l.i += n
	l.pos += n
}

// quoted reads a string literal, ” standing for a quote.
func (l *lexer) quoted() error {
	var b strings.Builder
	start := l.pos
	l.ascii(1)
	for {
		if l.i >= len(l.src) {
			return &Error{Pos: start, Msg: "the string that starts here is not closed with '"}
		}
		c, cw := utf8.DecodeRuneInString(l.src[l.i:])
		l.i += cw
		l.pos++
		if c == '\'' {
			if l.i < len(l.src) && l.src[l.i] == '\'' {
				l.ascii(1)
				b.WriteByte('\'')
				continue
			}
			break
		}
		b.WriteRune(c)
	}
	l.toks = append(l.toks, token{kind: tString, text: b.String(), pos: start})
	return nil
}

// number reads an exact (digits) or approximate (a point or an exponent)
// numeric literal.
func (l *lexer) number() error {
	start, startPos := l.i, l.pos
	digits := func() {
		for l.i < len(l.src) && isDigit(l.src[l.i]) {
			l.ascii(1)
		}
	}
	kind := tInt
	digits()
	if l.i < len(l.src) && l.src[l.i] == '.' {
		kind = tFloat
		l.ascii(1)
		digits()
	}
	if l.i < len(l.src) && (l.src[l.i] == 'e' || l.src[l.i] == 'E') {
		j := l.i + 1
		if j < len(l.src) && (l.src[j] == '+' || l.src[j] == '-') {
			j++
		}
		if j < len(l.src) && isDigit(l.src[j]) {
			kind = tFloat
			l.ascii(j - l.i)
			digits()
		}
	}
	if l.i < len(l.src) {
		if c, _ := utf8.DecodeRuneInString(l.src[l.i:]); isIdentPart(c) {
			return &Error{Pos: startPos, Msg: fmt.Sprintf("%q is not a number", l.src[start:l.i]+string(c))}
		}
	}
	l.toks = append(l.toks, token{kind: kind, text: l.src[start:l.i], pos: startPos})
	return nil
}

// word reads an identifier or a keyword.
func (l *lexer) word() {
	start, startPos := l.i, l.pos
	for l.i < len(l.src) {
		c, cw := utf8.DecodeRuneInString(l.src[l.i:])
		if !isIdentPart(c) {
			break
		}
		l.i += cw
		l.pos++
	}
	word := l.src[start:l.i]
	if up := strings.ToUpper(word); keywords[up] {
		l.toks = append(l.toks, token{kind: tKeyword, text: up, pos: startPos})
		return
	}
	l.toks = append(l.toks, token{kind: tIdent, text: word, pos: startPos})
}

// operator reads an operator or a parenthesis, starting with r.
func (l *lexer) operator(r rune) error {
	rest := l.src[l.i:]
	switch {
	case strings.HasPrefix(rest, "<>"), strings.HasPrefix(rest, "<="), strings.HasPrefix(rest, ">="):
		l.toks = append(l.toks, token{kind: tOp, text: rest[:2], pos: l.pos})
		l.ascii(2)
	case strings.ContainsRune("=<>+-*/(),", r):
		l.toks = append(l.toks, token{kind: tOp, text: string(r), pos: l.pos})
		l.ascii(1)
	case strings.HasPrefix(rest, "!="):
		return &Error{Pos: l.pos, Msg: `"!=" is not a selector operator: use "<>"`}
	default:
		return &Error{Pos: l.pos, Msg: fmt.Sprintf("unexpected character %q", r)}
	}
	return nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// isIdentStart and isIdentPart follow Java's identifier rules, which the
// specification names.
func isIdentStart(r rune) bool { return unicode.IsLetter(r) || r == '_' || r == '$' }
func isIdentPart(r rune) bool  { return isIdentStart(r) || unicode.IsDigit(r) }

// number parses a numeric token, negated when neg (so that the smallest
// int64 can be written).
func number(t token, neg bool) (Value, error) {
	text := t.text
	if neg {
		text = "-" + text
	}
	if t.kind == tInt {
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return Value{}, &Error{Pos: t.pos, Msg: fmt.Sprintf("%s is out of the range of a 64-bit integer", text)}
		}
		return IntValue(n), nil
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return Value{}, &Error{Pos: t.pos, Msg: fmt.Sprintf("%s is out of the range of a 64-bit float", text)}
	}
	return FloatValue(f), nil
}
