package selector

import "strconv"

// Kind is the type of a Value.
type Kind uint8

// The kinds of a Value; the zero Value is Null.
const (
	Null Kind = iota
	String
	Int
	Float
	Bool
)

func (k Kind) String() string {
	switch k {
	case String:
		return "string"
	case Int:
		return "int"
	case Float:
		return "float"
	case Bool:
		return "bool"
	}
	return "null"
}

// Value is a header's or a property's value as a selector sees it: a
// string, an int64, a float64, a bool, or NULL (the zero Value: absent).
type Value struct {
	kind Kind
	s    string
	i    int64
	f    float64
}

// StringValue, IntValue, FloatValue and BoolValue make a Value.
func StringValue(s string) Value { return Value{kind: String, s: s} }
func IntValue(i int64) Value     { return Value{kind: Int, i: i} }
func FloatValue(f float64) Value { return Value{kind: Float, f: f} }
func BoolValue(b bool) Value     { return Value{kind: Bool, i: b2i(b)} }
func (v Value) Kind() Kind       { return v.kind }
func (v Value) IsNull() bool     { return v.kind == Null }
func (v Value) Str() string      { return v.s }
func (v Value) Int() int64       { return v.i }
func (v Value) Float() float64   { return v.f }
func (v Value) Bool() bool       { return v.kind == Bool && v.i != 0 }
func (v Value) numeric() bool    { return v.kind == Int || v.kind == Float }
func (v Value) asFloat() float64 {
	if v.kind == Int {
		return float64(v.i)
	}
	return v.f
}

// String renders v as a selector literal would write it.
func (v Value) String() string {
	switch v.kind {
	case String:
		return "'" + quote(v.s) + "'"
	case Int:
		return strconv.FormatInt(v.i, 10)
	case Float:
		return strconv.FormatFloat(v.f, 'g', -1, 64)
	case Bool:
		if v.i != 0 {
			return "TRUE"
		}
		return "FALSE"
	}
	return "NULL"
}

func quote(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(out)
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// unknown is the third truth value: NULL.
var unknown = Value{}

func truth(b bool) Value { return BoolValue(b) }
