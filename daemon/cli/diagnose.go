package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/daemon/diagnose"
	"github.com/routelet/routelet/daemon/hostread"
	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/pkg/overlay"
)

// diagnoseUsage is diagnose's synopsis.
const diagnoseUsage = `usage: routeletd diagnose [--output text|json] [--probe] [daemon flags] SRC DST

SRC and DST (the last two arguments) are each a pod on this node
(namespace/name, or its container ID or a prefix of it), a pod IP (of any
node) or a node name. With routeletd running, the configuration it runs
with is used, and a daemon flag that contradicts it is reported; with it
stopped, the daemon flags (--config, --state-dir, --node-name,
--encapsulation, …, or their ROUTELET_* variables) say what it ran with.
Exit status: 0 every step passed, 1 a step failed, 2 bad arguments.
`

// diagnoseArgs are diagnose's own flags and its two ends; the rest of the
// arguments are the daemon's configuration.
type diagnoseArgs struct {
	output   string
	probe    bool
	src, dst string
	config   []string
}

// parseDiagnoseArgs takes --output, -o and --probe from anywhere and SRC
// and DST from the end; everything else is left for config.Load.
func parseDiagnoseArgs(args []string) (diagnoseArgs, error) {
	d := diagnoseArgs{output: "text"}
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || a == "-" {
			rest = append(rest, a)
			continue
		}
		switch name {
		case "output", "o":
			if !hasVal {
				if i+1 >= len(args) {
					return d, fmt.Errorf("flag %s needs a value (text or json)", a)
				}
				i++
				val = args[i]
			}
			if val != "text" && val != "json" {
				return d, fmt.Errorf("--output %q: want text or json", val)
			}
			d.output = val
		case "probe":
			d.probe = true
			if hasVal {
				b, err := strconv.ParseBool(val)
				if err != nil {
					return d, fmt.Errorf("--probe=%q: not a boolean", val)
				}
				d.probe = b
			}
		case "h", "help":
			return d, flagHelp
		default:
			rest = append(rest, a)
		}
	}
	if len(rest) < 2 || strings.HasPrefix(rest[len(rest)-1], "-") || strings.HasPrefix(rest[len(rest)-2], "-") {
		return d, errors.New("want SRC and DST as the last two arguments")
	}
	d.src, d.dst = rest[len(rest)-2], rest[len(rest)-1]
	d.config = rest[:len(rest)-2]
	return d, nil
}

// flagHelp asks for the usage text.
var flagHelp = errors.New("help")

// Diagnose walks the path between SRC and DST on this node and prints
// each step (docs/daemon.md).
func Diagnose(args []string) int {
	return diagnoseMain(args, os.Stdout, os.Stderr)
}

// diagnoseMain is Diagnose with its output streams.
func diagnoseMain(args []string, stdout, stderr io.Writer) int {
	d, err := parseDiagnoseArgs(args)
	if errors.Is(err, flagHelp) {
		fmt.Fprint(stdout, diagnoseUsage)
		return ExitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "routeletd diagnose: %s\n%s", esc(err.Error()), diagnoseUsage)
		return ExitConfig
	}
	cfg, err := config.Load(d.config, os.LookupEnv, config.ReadFile, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "routeletd diagnose: %s\n", esc(err.Error()))
		return ExitConfig
	}
	cfg = runningConfig("diagnose", cfg, stderr)
	mode, err := overlay.ParseMode(cfg.Encapsulation, cfg.CrossSubnet)
	if err != nil {
		fmt.Fprintf(stderr, "routeletd diagnose: %s\n", esc(err.Error()))
		return ExitConfig
	}
	st, err := diagnose.OpenStateDir(cfg.StateDir)
	if err != nil {
		fmt.Fprintf(stderr, "routeletd diagnose: %s\n", esc(err.Error()))
		return ExitFail
	}
	opts := diagnose.Options{Probe: d.probe, Prober: diagnose.ICMPProber{}}
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	opts.Daemon, opts.DaemonDown = askDaemon(ctx, cfg.StateDir)
	cancel()
	k, closeK, err := diagnose.NewKernel(diagnose.KernelOptions{RouteProtocol: cfg.RouteProtocol, Owned: hostread.OwnLink(cfg)})
	if err != nil {
		fmt.Fprintf(stderr, "routeletd diagnose: %s\n", esc(err.Error()))
		return ExitFail
	}
	defer closeK()
	rep, err := diagnose.Run(diagnose.Config{
		NodeName: cfg.NodeName, StateDir: cfg.StateDir, IfacePrefix: cfg.IfacePrefix, RouteProtocol: cfg.RouteProtocol,
		Mode: mode, VXLANDevice: cfg.VXLANDevice, VNI: cfg.VXLANVNI, Port: cfg.VXLANPort, MTU: cfg.MTU,
		PodCIDRs: cfg.PodCIDRs, ExternalNodeCIDRs: cfg.ExternalNodeCIDRs, Datastore: cfg.Datastore,
		Encrypted: cfg.Encrypted(), WireGuardDevice: cfg.WireGuard.Device, WireGuardPort: cfg.WireGuard.Port,
		BGP: cfg.BGP.Enabled, BGPRouteProtocol: cfg.BGP.RouteProtocol, BGPProgram: bgpProgram(cfg),
	}, st, k, d.src, d.dst, opts)
	var aerr *diagnose.ArgError
	if errors.As(err, &aerr) {
		fmt.Fprintf(stderr, "routeletd diagnose: %s\n", esc(err.Error()))
		return ExitConfig
	}
	if err != nil {
		fmt.Fprintf(stderr, "routeletd diagnose: %s\n", esc(err.Error()))
		return ExitFail
	}
	write := diagnose.WriteText
	if d.output == "json" {
		write = diagnose.WriteJSON
	}
	if err := write(stdout, rep); err != nil {
		fmt.Fprintf(stderr, "routeletd diagnose: %s\n", esc(err.Error()))
		return ExitFail
	}
	if !rep.OK {
		return ExitFail
	}
	return ExitOK
}

// bgpProgram reports whether the BGP speaker programs the routes it
// learns: encapsulation none and no encryption (otherwise it only
// announces, and the overlay or WireGuard routes pod traffic).
func bgpProgram(cfg *config.Config) bool {
	return cfg.BGP.Enabled && cfg.Encapsulation == config.EncapNone && !cfg.Encrypted()
}

// askDaemon asks the daemon of stateDir for its state; when none answers
// it says why, in the words status uses.
func askDaemon(ctx context.Context, stateDir string) (*statusapi.State, string) {
	st, err := statusapi.Get(ctx, stateDir)
	switch {
	case err == nil:
		return st, ""
	case errors.Is(err, statusapi.ErrNoDaemon):
		return nil, "routeletd is not running"
	}
	return nil, fmt.Sprintf("routeletd does not answer: %v", err)
}
