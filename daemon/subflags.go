package main

import (
	"fmt"
	"strings"
)

// takeFlags removes from args the flags a subcommand adds to the daemon's
// own (which config.Load parses from what is left): --name value,
// --name=value, or -name. want maps each name to whether it is boolean
// (takes no value unless given as --name=value). Values of a repeated
// flag accumulate; a comma-separated value is kept whole.
func takeFlags(args []string, want map[string]bool) (map[string][]string, []string, error) {
	got := map[string][]string{}
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		isBool, ok := want[name]
		if !strings.HasPrefix(a, "-") || !ok {
			rest = append(rest, a)
			continue
		}
		switch {
		case hasVal:
		case isBool:
			val = "true"
		case i+1 == len(args):
			return nil, nil, fmt.Errorf("flag --%s needs a value", name)
		default:
			i++
			val = args[i]
		}
		got[name] = append(got[name], val)
	}
	return got, rest, nil
}

// lastValue returns the last value given for name, or def.
func lastValue(got map[string][]string, name, def string) string {
	if v := got[name]; len(v) > 0 {
		return v[len(v)-1]
	}
	return def
}

// outputFlag takes --output (or -o) text|json out of args.
func outputFlag(args []string) (string, []string, error) {
	got, rest, err := takeFlags(args, map[string]bool{"output": false, "o": false})
	if err != nil {
		return "", nil, err
	}
	out := lastValue(got, "output", lastValue(got, "o", "text"))
	if out != "text" && out != "json" {
		return "", nil, fmt.Errorf("flag --output: invalid value %q: want text or json", out)
	}
	return out, rest, nil
}
