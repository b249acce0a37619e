package selector

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// fields is a message's headers and properties for a test.
type fields map[string]Value

func (f fields) get(name string) Value { return f[name] }

func mustParse(t *testing.T, src string) *Selector {
	t.Helper()
	s, err := Parse(src)
	if err != nil {
		t.Fatalf("Parse(%q): %v", src, err)
	}
	return s
}

// TestSelector_SpecificationExamples are the examples of the JMS
// specification's section on message selectors, each with the messages it
// names as matching and not matching.
func TestSelector_SpecificationExamples(t *testing.T) {
	for _, c := range []struct {
		selector string
		match    []fields
		miss     []fields
	}{
		{
			selector: "JMSType = 'car' AND color = 'blue' AND weight > 2500",
			match:    []fields{{"JMSType": StringValue("car"), "color": StringValue("blue"), "weight": IntValue(2501)}},
			miss: []fields{
				{"JMSType": StringValue("car"), "color": StringValue("blue"), "weight": IntValue(2500)},
				{"JMSType": StringValue("car"), "color": StringValue("red"), "weight": IntValue(3000)},
				{"color": StringValue("blue"), "weight": IntValue(3000)}, // JMSType NULL
			},
		},
		{selector: "age BETWEEN 15 AND 19", match: []fields{{"age": IntValue(15)}, {"age": IntValue(19)}, {"age": FloatValue(17.5)}}, miss: []fields{{"age": IntValue(14)}, {"age": IntValue(20)}, {}}},
		{selector: "age NOT BETWEEN 15 AND 19", match: []fields{{"age": IntValue(14)}, {"age": IntValue(20)}}, miss: []fields{{"age": IntValue(15)}, {"age": IntValue(19)}, {}}},
		{selector: "Country IN ('UK', 'US', 'France')", match: []fields{{"Country": StringValue("UK")}}, miss: []fields{{"Country": StringValue("Peru")}, {}}},
		{selector: "Country NOT IN ('UK', 'US', 'France')", match: []fields{{"Country": StringValue("Peru")}}, miss: []fields{{"Country": StringValue("UK")}, {}}},
		{selector: "phone LIKE '12%3'", match: []fields{{"phone": StringValue("123")}, {"phone": StringValue("12993")}}, miss: []fields{{"phone": StringValue("1234")}, {}}},
		{selector: "word LIKE 'l_se'", match: []fields{{"word": StringValue("lose")}}, miss: []fields{{"word": StringValue("loose")}}},
		{selector: `underscored LIKE '\_%' ESCAPE '\'`, match: []fields{{"underscored": StringValue("_foo")}}, miss: []fields{{"underscored": StringValue("bar")}}},
		{selector: "phone NOT LIKE '12%3'", match: []fields{{"phone": StringValue("1234")}}, miss: []fields{{"phone": StringValue("123")}, {"phone": StringValue("12993")}, {}}},
		{selector: "prop_name IS NULL", match: []fields{{}}, miss: []fields{{"prop_name": StringValue("x")}}},
		{selector: "prop_name IS NOT NULL", match: []fields{{"prop_name": IntValue(0)}}, miss: []fields{{}}},
		{selector: "NOT (age >= 15 AND age <= 19)", match: []fields{{"age": IntValue(20)}}, miss: []fields{{"age": IntValue(16)}, {}}},
		{selector: "JMSPriority > 4 OR urgent", match: []fields{{"JMSPriority": IntValue(5)}, {"urgent": BoolValue(true), "JMSPriority": IntValue(0)}}, miss: []fields{{"JMSPriority": IntValue(4)}, {"JMSPriority": IntValue(4), "urgent": BoolValue(false)}}},
		{selector: "JMSDeliveryMode = 'PERSISTENT'", match: []fields{{"JMSDeliveryMode": StringValue("PERSISTENT")}}, miss: []fields{{"JMSDeliveryMode": StringValue("NON_PERSISTENT")}}},
	} {
		s := mustParse(t, c.selector)
		for _, f := range c.match {
			if !s.Match(f.get) {
				t.Errorf("%s: did not match %v", c.selector, f)
			}
		}
		for _, f := range c.miss {
			if s.Match(f.get) {
				t.Errorf("%s: matched %v", c.selector, f)
			}
		}
	}
}

// TestSelector_ThreeValuedLogic checks the specification's truth tables for
// AND, OR and NOT with unknown (a missing property compared).
func TestSelector_ThreeValuedLogic(t *testing.T) {
	const T, F, U = "1 = 1", "1 = 2", "missing = 1"
	for _, c := range []struct {
		selector string
		want     Value
	}{
		{T + " AND " + T, truth(true)}, {T + " AND " + F, truth(false)}, {T + " AND " + U, unknown},
		{F + " AND " + U, truth(false)}, {U + " AND " + F, truth(false)}, {U + " AND " + U, unknown},
		{T + " OR " + U, truth(true)}, {U + " OR " + T, truth(true)}, {F + " OR " + U, unknown},
		{F + " OR " + F, truth(false)}, {U + " OR " + U, unknown},
		{"NOT " + T, truth(false)}, {"NOT " + F, truth(true)}, {"NOT " + U, unknown},
		{"NOT (" + U + ")", unknown},
		{"missing + 1 > 0", unknown}, {"-missing < 0", unknown}, {"missing BETWEEN 1 AND 2", unknown},
		{"missing LIKE 'x'", unknown}, {"missing NOT IN ('x')", unknown},
	} {
		s := mustParse(t, c.selector)
		if got := s.root.eval(fields{}.get); got != c.want {
			t.Errorf("%s = %v, want %v", c.selector, got, c.want)
		}
		if s.Match(fields{}.get) != c.want.Bool() {
			t.Errorf("%s: Match is not %v", c.selector, c.want.Bool())
		}
	}
}

// TestSelector_TypesAndArithmetic checks numeric promotion, integer
// arithmetic, unlike types, precedence and literals.
func TestSelector_TypesAndArithmetic(t *testing.T) {
	f := fields{
		"i": IntValue(7), "f": FloatValue(2.5), "s": StringValue("7"), "b": BoolValue(true),
		"zero": IntValue(0), "nan": FloatValue(math.NaN()), "max": IntValue(math.MaxInt64),
	}
	for _, c := range []struct {
		selector string
		match    bool
	}{
		{"i = 7", true}, {"i = 7.0", true}, {"i > 6.5", true}, {"f * 2 = 5", true},
		{"i / 2 = 3", true}, {"i / 2.0 = 3.5", true}, {"-i = -7", true}, {"+i = 7", true},
		{"1 + 2 * 3 = 7", true}, {"(1 + 2) * 3 = 9", true}, {"10 - 4 - 3 = 3", true}, {"12 / 3 / 2 = 2", true},
		{"s = 7", false}, {"s <> 7", false}, {"s = '7'", true}, {"b = TRUE", true}, {"b", true}, {"b <> false", true},
		{"i = '7'", false}, {"b = 1", false}, {"i / zero = 1", false}, {"NOT (i / zero = 1)", false},
		{"f / zero > 1e308", true}, {"nan = nan", false}, {"nan <> nan", true}, {"nan < 1", false},
		{"max + 1 < 0", true}, {"i = 7e0", true}, {"7. = i", true}, {".5 = 0.5", true}, {"1E3 = 1000", true},
		{"-9223372036854775808 < 0", true}, {"true AND NOT false", true}, {"i = 7 and s = '7' oR false", true},
		{"'it''s' = 'it''s'", true}, {"i IN ('7')", false}, {"i NOT IN ('7')", true}, {"i LIKE '7'", false},
		{"s BETWEEN 1 AND 9", false}, {"résumé = 'x' OR $a_1 IS NULL", true}, {"i>=7 AND i<=7 AND i<>8", true},
		{"s LIKE '%'", true}, {"s LIKE '_'", true}, {"s LIKE '__'", false},
	} {
		if got := mustParse(t, c.selector).Match(f.get); got != c.match {
			t.Errorf("%s: Match = %v, want %v", c.selector, got, c.match)
		}
	}
}

func TestSelector_Like(t *testing.T) {
	for _, c := range []struct {
		pattern, escape, value string
		match                  bool
	}{
		{"%", "", "", true}, {"_", "", "", false}, {"a%b%c", "", "aXbYc", true}, {"a%b%c", "", "aXbY", false},
		{"%%a%%", "", "bab", true}, {"a!%", "!", "a%", true}, {"a!%", "!", "ab", false}, {"a!_b", "!", "a_b", true},
		{"a!!", "!", "a!", true}, {"ünï_ødé", "", "ünïcødé", true}, {"%aab", "", "aaab", true},
		{"a%a%a%a%a%b", "", strings.Repeat("a", 200), false},
	} {
		esc := rune(-1)
		if c.escape != "" {
			esc = []rune(c.escape)[0]
		}
		p, err := compileLike(c.pattern, esc)
		if err != nil {
			t.Fatalf("compileLike(%q): %v", c.pattern, err)
		}
		if got := p.match(c.value); got != c.match {
			t.Errorf("%q LIKE %q ESCAPE %q = %v, want %v", c.value, c.pattern, c.escape, got, c.match)
		}
	}
}

// TestSelector_Refused checks that every malformed selector gives an
// *Error matching ErrInvalid at the position of the fault.
func TestSelector_Refused(t *testing.T) {
	for _, c := range []struct {
		selector string
		pos      int
		says     string
	}{
		{"color = ", 9, "expected a value"},
		{"color = 'blue", 9, "not closed"},
		{"color == 'blue'", 8, "expected a value"},
		{"color != 'blue'", 7, "use \"<>\""},
		{"(a = 1", 7, "expected )"},
		{"a = 1)", 6, "expected an operator or the end"},
		{"a = 1 AND", 10, "expected a value"},
		{"5", 1, "is a number"},
		{"'x'", 1, "is a string"},
		{"a + 'x' = 1", 5, "arithmetic needs a number"},
		{"NOT 5", 5, "NOT needs a condition"},
		{"a = 1 OR 'x'", 10, "OR needs a condition"},
		{"a > 'x'", 5, "compares only with = and <>"},
		{"TRUE < a", 1, "compares only with = and <>"},
		{"'a' LIKE 'a'", 1, "LIKE applies to a header or property name"},
		{"a LIKE b", 8, "LIKE takes a quoted pattern"},
		{"a LIKE 'x' ESCAPE 'ab'", 19, "ESCAPE takes one quoted character"},
		{"a LIKE 'x!' ESCAPE '!'", 8, "ends with its escape"},
		{"a IN ()", 7, "IN takes a list of quoted strings"},
		{"a IN ('x', 1)", 12, "IN takes a list of quoted strings"},
		{"1 IN ('x')", 1, "IN applies"},
		{"a IS 5", 6, "expected NULL"},
		{"1 IS NULL", 1, "IS NULL applies"},
		{"a = NULL", 5, "IS NULL and IS NOT NULL"},
		{"a NOT = 1", 7, "expected BETWEEN, IN or LIKE after NOT"},
		{"a BETWEEN 1 OR 2", 13, "expected AND"},
		{"a BETWEEN 'x' AND 2", 11, "BETWEEN needs a number"},
		{"9223372036854775808 = a", 1, "out of the range"},
		{"1e999 = a", 1, "out of the range"},
		{"12abc = 1", 1, "is not a number"},
		{"a = 1 ; b = 2", 7, "unexpected character"},
		{"a = 1 = TRUE", 7, "expected an operator or the end"},
		{"a = '\xff'", 6, "not valid UTF-8"},
		{"AND = 1", 1, "expected a value"},
		{strings.Repeat("(", MaxDepth+1) + "a" + strings.Repeat(")", MaxDepth+1), MaxDepth + 1, "nests more than"},
		{strings.Repeat("NOT ", MaxDepth+1) + "a", MaxDepth*4 + 1, "nests more than"},
		{"a = '" + strings.Repeat("x", MaxLen) + "'", 1, "over the limit"},
	} {
		s, err := Parse(c.selector)
		var e *Error
		if !errors.Is(err, ErrInvalid) || !errors.As(err, &e) {
			t.Errorf("Parse(%.40q) = %v, %v; want an *Error", c.selector, s, err)
			continue
		}
		if e.Pos != c.pos || !strings.Contains(e.Msg, c.says) {
			t.Errorf("Parse(%.40q): %v; want position %d and %q", c.selector, err, c.pos, c.says)
		}
	}
}

func TestSelector_EmptyMatchesEverything(t *testing.T) {
	for _, src := range []string{"", "  \t\n"} {
		s, err := Parse(src)
		if err != nil || s != nil {
			t.Fatalf("Parse(%q) = %v, %v; want nil, nil", src, s, err)
		}
		if !s.Match(fields{}.get) || s.String() != "" {
			t.Fatalf("the nil selector does not match everything")
		}
	}
	if s := mustParse(t, "a = 1"); s.String() != "a = 1" {
		t.Fatalf("String() = %q", s.String())
	}
}

// FuzzParse: Parse never panics, refuses only with an *Error whose
// position lies within the selector (or one past it), and what it accepts
// evaluates without panicking on any fields.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"JMSType = 'car' AND color = 'blue' AND weight > 2500", "age NOT BETWEEN -15 AND 1.9e1",
		`a LIKE '\_%' ESCAPE '\'`, "x IN ('a','b') OR y IS NOT NULL", "NOT (a / 0 = -9223372036854775808)",
		"(((a)))", "a = 'it''s'", ".5E-3 <> b * +c - d",
	} {
		f.Add(seed)
	}
	vals := []Value{{}, IntValue(0), IntValue(-1), FloatValue(math.Inf(1)), FloatValue(math.NaN()), StringValue("a_b%"), BoolValue(true)}
	f.Fuzz(func(t *testing.T, src string) {
		s, err := Parse(src)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrInvalid) || e.Pos < 1 || e.Pos > len([]rune(src))+1 {
				t.Fatalf("Parse(%q): %v", src, err)
			}
			return
		}
		for _, v := range vals {
			s.Match(func(string) Value { return v })
		}
	})
}

// BenchmarkSelector_Match evaluates the specification's first example over
// a message's fields, as a member's host does for each message it deals.
func BenchmarkSelector_Match(b *testing.B) {
	s, err := Parse("JMSType = 'car' AND color = 'blue' AND weight > 2500")
	if err != nil {
		b.Fatal(err)
	}
	f := fields{"JMSType": StringValue("car"), "color": StringValue("blue"), "weight": IntValue(3000)}
	get := f.get
	b.ReportAllocs()
	for b.Loop() {
		if !s.Match(get) {
			b.Fatal("no match")
		}
	}
}
