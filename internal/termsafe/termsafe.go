// Package termsafe makes values from records and the kernel safe to print
// on an operator's terminal. A pod name, a record file name or an error
// text holding ESC, BEL, a newline or a bidi override would otherwise
// reach the terminal raw: clear the screen, move the cursor, reorder the
// line or print a forged line of output. Text output escapes every such
// value with Escape; JSON output and logs escape on their own.
package termsafe

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Escape returns s with every character a terminal could act on written
// the way strconv.Quote writes it, without the quotes: C0 and C1 control
// characters and DEL (\n, \t, \a, \x1b, \u009b …), Unicode format
// characters such as the bidi overrides and isolates (\u202e, \u2066) and
// the line and paragraph separators, every other rune strconv.IsPrint
// rejects, and invalid UTF-8 bytes (\xff). Printable text, non-ASCII
// letters and symbols (✓, é, 日本) included, is returned unchanged, so
// ordinary output does not change. A backslash is left as it is: the
// text form is for reading; the JSON form is exact.
func Escape(s string) string {
	i := firstUnsafe(s)
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for len(s[i:]) > 0 {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteString(`\x`)
			b.WriteByte("0123456789abcdef"[s[i]>>4])
			b.WriteByte("0123456789abcdef"[s[i]&0xf])
		case safe(r):
			b.WriteString(s[i : i+n])
		default:
			q := strconv.QuoteRune(r) // 'x' with r escaped
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}

// Strings is Escape of each element, in a new slice.
func Strings(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = Escape(s)
	}
	return out
}

// firstUnsafe is the byte offset of the first rune Escape changes, -1
// when there is none.
func firstUnsafe(s string) int {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return i
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || !safe(r) {
			return i
		}
		i += n
	}
	return -1
}

// safe reports whether r is printed as itself: printable (letters, marks,
// numbers, punctuation, symbols, the ASCII space), and neither a quote
// nor a backslash would be escaped by strconv.QuoteRune.
func safe(r rune) bool {
	return r == '\\' || r == '\'' || r == '"' || strconv.IsPrint(r)
}
