package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// propertyFlag adds the repeatable --property flag to cmd.
func propertyFlag(cmd *cobra.Command) *[]string {
	var props []string
	cmd.Flags().StringArrayVar(&props, "property", nil,
		"a message property, repeatable: key=value (a string), or key:int=5, key:float=2.5, key:bool=true")
	return &props
}

// parseProperties reads --property flags: key=value is a string; key:T=value
// is of type T (string, int, float or bool).
func parseProperties(flags []string) (map[string]any, error) {
	if len(flags) == 0 {
		return nil, nil
	}
	props := make(map[string]any, len(flags))
	for _, f := range flags {
		key, value, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("--property %q: write key=value, or key:int=5, key:float=2.5, key:bool=true", f)
		}
		typ := "string"
		if i := strings.LastIndexByte(key, ':'); i >= 0 {
			key, typ = key[:i], key[i+1:]
		}
		if key == "" {
			return nil, fmt.Errorf("--property %q: the property has no name", f)
		}
		if _, twice := props[key]; twice {
			return nil, fmt.Errorf("--property %q: %s is given twice", f, key)
		}
		var err error
		switch typ {
		case "string":
			props[key] = value
		case "int":
			props[key], err = strconv.ParseInt(value, 10, 64)
		case "float":
			props[key], err = strconv.ParseFloat(value, 64)
		case "bool":
			props[key], err = strconv.ParseBool(value)
		default:
			return nil, fmt.Errorf("--property %q: unknown type %q; use string, int, float or bool", f, typ)
		}
		if err != nil {
			return nil, fmt.Errorf("--property %q: %q is not %s", f, value, map[string]string{"int": "an int", "float": "a float", "bool": "a bool"}[typ])
		}
	}
	return props, nil
}
