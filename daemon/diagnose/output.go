package diagnose

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/routelet/routelet/internal/termsafe"
)

// marks are the text output's verdict signs.
var marks = map[Status]string{Pass: "✓", Fail: "✗", Info: "·"}

// WriteText writes the report as one line per step, with what is wrong
// and the fix under each failed one, and a summary line. Facts, problems
// and fixes quote pod names, addresses, devices and errors from records
// and the kernel: each is escaped (termsafe), so no value can put a
// control character on the terminal or a line of its own into the report.
func WriteText(out io.Writer, r *Report) error {
	var b strings.Builder
	if r.DaemonDown != "" {
		fmt.Fprintf(&b, "%s: the steps below are what the state directory and the kernel show; nothing is repaired until it runs\n", esc(r.DaemonDown))
	}
	fmt.Fprintf(&b, "diagnose %s → %s on node %s\n", esc(describeEnd(r.Src)), esc(describeEnd(r.Dst)), esc(r.Node))
	failed := 0
	for _, s := range r.Steps {
		id := s.ID
		if s.Family != 0 {
			id = fmt.Sprintf("%s IPv%d", s.ID, s.Family)
		}
		fmt.Fprintf(&b, "%s %-21s %s\n", marks[s.Status], esc(id), esc(s.Fact))
		if s.Status == Fail {
			failed++
			fmt.Fprintf(&b, "  %-21s %s\n", "  wrong:", esc(s.Problem))
		}
		if s.Fix != "" {
			fmt.Fprintf(&b, "  %-21s %s\n", "  fix:", esc(s.Fix))
		}
	}
	if failed == 0 {
		fmt.Fprintf(&b, "every step passed (%d)\n", len(r.Steps))
	} else {
		fmt.Fprintf(&b, "%d of %d steps failed\n", failed, len(r.Steps))
	}
	_, err := io.WriteString(out, b.String())
	return err
}

// esc escapes a value for the terminal.
var esc = termsafe.Escape

// describeEnd names an end for the heading.
func describeEnd(e End) string {
	switch e.Kind {
	case KindPod:
		if e.Pod != "" {
			return fmt.Sprintf("pod %s (%s)", e.Pod, addrList(e.Addrs))
		}
		return fmt.Sprintf("%s (no pod)", addrList(e.Addrs))
	case KindRemotePod:
		return fmt.Sprintf("%s (node %s, block %s)", addrList(e.Addrs), e.Node, e.Block)
	case KindNode:
		return "node " + e.Node
	}
	return fmt.Sprintf("%s (unknown)", addrList(e.Addrs))
}

// WriteJSON writes the report as one indented JSON object.
func WriteJSON(out io.Writer, r *Report) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
