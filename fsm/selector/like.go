package selector

import "fmt"

// pattern is a compiled LIKE pattern: runes, with anyOne for _ and anyRun
// for %.
type pattern []rune

const (
	anyOne rune = -1 - iota
	anyRun
)

// compileLike compiles a LIKE pattern; escape is -1 when there is none.
// An escape makes the character after it stand for itself.
func compileLike(src string, escape rune) (pattern, error) {
	var p pattern
	rs := []rune(src)
	for i := 0; i < len(rs); i++ {
		switch r := rs[i]; {
		case r == escape:
			if i+1 == len(rs) {
				return nil, fmt.Errorf("the pattern ends with its escape character %q", escape)
			}
			i++
			p = append(p, rs[i])
		case r == '_':
			p = append(p, anyOne)
		case r == '%':
			if len(p) == 0 || p[len(p)-1] != anyRun { // %% is %
				p = append(p, anyRun)
			}
		default:
			p = append(p, r)
		}
	}
	return p, nil
}

// match reports whether s matches the whole pattern. It backtracks only to
// the last %, so it costs at most len(pattern) × len(s) steps.
func (p pattern) match(s string) bool {
	rs := []rune(s)
	pi, si := 0, 0
	star, mark := -1, 0
	for si < len(rs) {
		switch {
		case pi < len(p) && (p[pi] == anyOne || p[pi] == rs[si]):
			pi++
			si++
		case pi < len(p) && p[pi] == anyRun:
			star, mark = pi, si
			pi++
		case star >= 0:
			mark++
			pi, si = star+1, mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == anyRun {
		pi++
	}
	return pi == len(p)
}
