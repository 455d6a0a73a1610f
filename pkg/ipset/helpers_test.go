package ipset

import (
	"log/slog"

	"github.com/routelet/routelet/internal/netiptest"
)

var quiet = slog.New(slog.DiscardHandler)

// pfx parses CIDRs.
var pfx = netiptest.Prefixes
