package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routelet/routelet/internal/buildinfo"
	"github.com/routelet/routelet/pkg/podnet"
	"github.com/routelet/routelet/pkg/state"
)

// supportedVersions are the CNI spec versions routelet speaks.
var supportedVersions = version.PluginSupports("0.3.1", "0.4.0", "1.0.0", "1.1.0")

func main() {
	podnet.CarrierMain() // the host veth deletions of DEL (pkg/podnet)
	setupLogging()
	if e := preflight(os.Getenv); e != nil {
		exitWith(e)
	}
	// The about line is printed only without CNI_COMMAND; the version
	// (checked against its pattern) is not worked out on every call.
	about := "CNI plugin routelet"
	if os.Getenv("CNI_COMMAND") == "" {
		about += " " + buildinfo.Version()
	}
	e := skel.PluginMainFuncsWithError(skel.CNIFuncs{
		Add:    cmdAdd,
		Del:    cmdDel,
		Check:  cmdCheck,
		GC:     cmdGC,
		Status: cmdStatus,
	}, supportedVersions, about)
	if e != nil {
		exitWith(explain(e))
	}
}

// exitWith prints e as the CNI error JSON on stdout and exits non-zero.
func exitWith(e *types.Error) {
	if err := e.Print(); err != nil {
		fmt.Fprintf(os.Stderr, "routelet: write error JSON: %v\n", err)
	}
	os.Exit(1)
}

// setupLogging sends warnings (and, with ROUTELET_LOG_LEVEL=debug, one line
// per kernel change) to stderr, which runtimes capture; stdout is reserved for
// the CNI result.
func setupLogging() {
	level := slog.LevelWarn
	if strings.EqualFold(os.Getenv("ROUTELET_LOG_LEVEL"), "debug") {
		level = slog.LevelDebug
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("plugin", "routelet"))
}

// preflight validates the environment before skel does, so that the error
// names the variable and its value (skel's messages do not always).
func preflight(getenv func(string) string) *types.Error {
	cmd := getenv("CNI_COMMAND")
	switch cmd {
	case "ADD", "DEL", "CHECK":
	default:
		return nil // skel handles VERSION, GC, STATUS and unknown commands
	}
	id := getenv("CNI_CONTAINERID")
	if id == "" {
		return cniErr(types.ErrInvalidEnvironmentVariables, "CNI_CONTAINERID is not set (required for %s)", cmd)
	}
	if err := state.ValidateContainerID(id); err != nil {
		return cniErr(types.ErrInvalidEnvironmentVariables, "CNI_CONTAINERID: %v", err)
	}
	ifName := getenv("CNI_IFNAME")
	if ifName == "" {
		return cniErr(types.ErrInvalidEnvironmentVariables, "CNI_IFNAME is not set (required for %s)", cmd)
	}
	if err := state.ValidateIfName(ifName); err != nil {
		return cniErr(types.ErrInvalidEnvironmentVariables, "CNI_IFNAME: %v", err)
	}
	if err := checkIfName(ifName); err != nil {
		return cniErr(types.ErrInvalidEnvironmentVariables, "CNI_IFNAME: %v", err)
	}
	if cmd == "DEL" {
		return nil // DEL must work when the namespace is already gone
	}
	path := getenv("CNI_NETNS")
	if path == "" {
		return cniErr(types.ErrInvalidEnvironmentVariables, "CNI_NETNS is not set (required for %s)", cmd)
	}
	if err := ns.IsNSorErr(path); err != nil {
		return cniErr(types.ErrInvalidEnvironmentVariables, "CNI_NETNS %q: not a network namespace: %v", path, err)
	}
	if same, err := podnet.IsCurrentNetns(path); err != nil {
		return cniErr(types.ErrInvalidEnvironmentVariables, "CNI_NETNS %q: %v", path, err)
	} else if same {
		return cniErr(types.ErrInvalidEnvironmentVariables, "CNI_NETNS %q is the plugin's own (node) network namespace", path)
	}
	return nil
}

// explain adds skel's details to the message (skel puts the offending
// version into Details only), so the one line a user sees names the value.
func explain(e *types.Error) *types.Error {
	if e.Details != "" && !strings.Contains(e.Msg, e.Details) {
		return &types.Error{Code: e.Code, Msg: e.Msg + ": " + e.Details, Details: e.Details}
	}
	return e
}
