package main

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseProperties(t *testing.T) {
	got, err := parseProperties([]string{"color=blue", "url=a=b", "empty=", "n:int=-5", "f:float=2.5", "b:bool=true", "t:string=x:y", "a:b:string=c"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"color": "blue", "url": "a=b", "empty": "", "n": int64(-5), "f": 2.5, "b": true, "t": "x:y", "a:b": "c"}
	if fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", want) {
		t.Fatalf("got %#v, want %#v", got, want)
	}
	for flag, says := range map[string]string{
		"color": "key=value", "=v": "no name", ":int=5": "no name", "n:long=5": `unknown type "long"`,
		"n:int=1.5": "not an int", "f:float=x": "not a float", "b:bool=maybe": "not a bool",
	} {
		if _, err := parseProperties([]string{flag}); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("--property %s: %v; want an error saying %q", flag, err, says)
		}
	}
	if _, err := parseProperties([]string{"k=1", "k:int=2"}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("a property given twice: %v", err)
	}
}
