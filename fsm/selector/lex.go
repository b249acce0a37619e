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
	var toks []token
	pos = 1 // character position of src[i]
	for i := 0; i < len(src); {
		r, w := utf8.DecodeRuneInString(src[i:])
		start, startPos := i, pos
		advance := func(n int) { // n bytes of ASCII
			i += n
			pos += n
		}
		switch {
		case unicode.IsSpace(r):
			i += w
			pos++
			continue
		case r == '\'':
			var b strings.Builder
			i++
			pos++
			for {
				if i >= len(src) {
					return nil, &Error{Pos: startPos, Msg: "the string that starts here is not closed with '"}
				}
				c, cw := utf8.DecodeRuneInString(src[i:])
				i += cw
				pos++
				if c == '\'' {
					if i < len(src) && src[i] == '\'' {
						i++
						pos++
						b.WriteByte('\'')
						continue
					}
					break
				}
				b.WriteRune(c)
			}
			toks = append(toks, token{kind: tString, text: b.String(), pos: startPos})
			continue
		case r >= '0' && r <= '9' || r == '.' && i+1 < len(src) && isDigit(src[i+1]):
			kind := tInt
			for i < len(src) && isDigit(src[i]) {
				advance(1)
			}
			if i < len(src) && src[i] == '.' {
				kind = tFloat
				advance(1)
				for i < len(src) && isDigit(src[i]) {
					advance(1)
				}
			}
			if i < len(src) && (src[i] == 'e' || src[i] == 'E') {
				j := i + 1
				if j < len(src) && (src[j] == '+' || src[j] == '-') {
					j++
				}
				if j < len(src) && isDigit(src[j]) {
					kind = tFloat
					advance(j - i)
					for i < len(src) && isDigit(src[i]) {
						advance(1)
					}
				}
			}
			if i < len(src) {
				if c, _ := utf8.DecodeRuneInString(src[i:]); isIdentPart(c) {
					return nil, &Error{Pos: startPos, Msg: fmt.Sprintf("%q is not a number", src[start:i]+string(c))}
				}
			}
			toks = append(toks, token{kind: kind, text: src[start:i], pos: startPos})
			continue
		case isIdentStart(r):
			for i < len(src) {
				c, cw := utf8.DecodeRuneInString(src[i:])
				if !isIdentPart(c) {
					break
				}
				i += cw
				pos++
			}
			word := src[start:i]
			if up := strings.ToUpper(word); keywords[up] {
				toks = append(toks, token{kind: tKeyword, text: up, pos: startPos})
			} else {
				toks = append(toks, token{kind: tIdent, text: word, pos: startPos})
			}
			continue
		}
		switch {
		case strings.HasPrefix(src[i:], "<>"), strings.HasPrefix(src[i:], "<="), strings.HasPrefix(src[i:], ">="):
			toks = append(toks, token{kind: tOp, text: src[i : i+2], pos: startPos})
			advance(2)
		case strings.ContainsRune("=<>+-*/(),", r):
			toks = append(toks, token{kind: tOp, text: string(r), pos: startPos})
			advance(1)
		case r == '!' && strings.HasPrefix(src[i:], "!="):
			return nil, &Error{Pos: pos, Msg: `"!=" is not a selector operator: use "<>"`}
		default:
			return nil, &Error{Pos: pos, Msg: fmt.Sprintf("unexpected character %q", r)}
		}
	}
	return append(toks, token{kind: tEOF, pos: utf8.RuneCountInString(src) + 1}), nil
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
