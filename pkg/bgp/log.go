package bgp

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"

	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
)

// gobgpLogger is GoBGP's log.Logger writing to an slog.Logger. GoBGP's
// Debug and Info messages (connection attempts, state changes, updates
// sent) are its chatter and go out at debug; its warnings and errors
// (notifications, malformed messages, prefix limits) at warn. Fatal and
// Panic only log: the library never ends the process. Every message about
// a peer (its Key field) is also handed to note, which keeps the peer's
// last error for status.
type gobgpLogger struct {
	log  *slog.Logger
	note func(msg string, fields gobgplog.Fields)
}

// quiet are GoBGP warnings that are no news for this speaker, logged at
// debug: the listeners' TTL of 255 is for TTL security, which this speaker
// does not use.
var quiet = []string{"cannot set TTL (255) for TCPListener"}

func (l *gobgpLogger) emit(level slog.Level, msg string, fields gobgplog.Fields) {
	if slices.Contains(quiet, msg) {
		level = slog.LevelDebug
	}
	if l.note != nil {
		l.note(msg, fields)
	}
	if !l.log.Enabled(context.Background(), level) {
		return
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	attrs := make([]any, 0, 2*len(keys)+2)
	attrs = append(attrs, "component", "gobgp")
	for _, k := range keys {
		attrs = append(attrs, strings.ToLower(k), fmt.Sprint(fields[k]))
	}
	l.log.Log(context.Background(), level, msg, attrs...)
}

func (l *gobgpLogger) Panic(msg string, f gobgplog.Fields) { l.emit(slog.LevelError, msg, f) }
func (l *gobgpLogger) Fatal(msg string, f gobgplog.Fields) { l.emit(slog.LevelError, msg, f) }
func (l *gobgpLogger) Error(msg string, f gobgplog.Fields) { l.emit(slog.LevelWarn, msg, f) }
func (l *gobgpLogger) Warn(msg string, f gobgplog.Fields)  { l.emit(slog.LevelWarn, msg, f) }
func (l *gobgpLogger) Info(msg string, f gobgplog.Fields)  { l.emit(slog.LevelDebug, msg, f) }
func (l *gobgpLogger) Debug(msg string, f gobgplog.Fields) { l.emit(slog.LevelDebug, msg, f) }

// SetLevel is ignored: the slog handler decides what is written.
func (l *gobgpLogger) SetLevel(gobgplog.LogLevel) {}

// GetLevel is always debug, so GoBGP hands over the messages it only
// builds at debug (connection failures among them), which note needs.
func (l *gobgpLogger) GetLevel() gobgplog.LogLevel { return gobgplog.DebugLevel }
