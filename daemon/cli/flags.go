package cli

import (
	"fmt"
	"maps"
	"os"
	"strings"

	"github.com/routelet/routelet/daemon/config"
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

// subcommandConfig takes a subcommand's own flags (own, plus --output or
// -o text|json) out of args and loads the daemon's configuration from
// the rest. A nil config means stop with the code returned (the error was
// printed, naming cmd).
func subcommandConfig(cmd string, args []string, own map[string]bool) (map[string][]string, string, *config.Config, int) {
	want := map[string]bool{"output": false, "o": false}
	maps.Copy(want, own)
	got, rest, err := takeFlags(args, want)
	if err == nil {
		if out := lastValue(got, "output", lastValue(got, "o", "text")); out != "text" && out != "json" {
			err = fmt.Errorf("flag --output: invalid value %q: want text or json", out)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "routeletd %s: %s\n", cmd, esc(err.Error()))
		return nil, "", nil, ExitConfig
	}
	cfg, _, code := LoadConfig(rest)
	return got, lastValue(got, "output", lastValue(got, "o", "text")), cfg, code
}
