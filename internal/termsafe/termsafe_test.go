package termsafe

import (
	"strings"
	"testing"
)

// TestEscape: printable text, non-ASCII included, passes unchanged;
// control characters, bidi and other format characters and invalid bytes
// come out as visible escapes, and the result holds no byte a terminal
// acts on.
func TestEscape(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"default/web-0", "default/web-0"},
		{`a "b" 'c' \d`, `a "b" 'c' \d`},
		{"café ✓ 日本 ✗ · → λ", "café ✓ 日本 ✗ · → λ"},
		{"x\x1b[2Jy", `x\x1b[2Jy`},
		{"bell\a", `bell\a`},
		{"pod\n✓ all ok", `pod\n✓ all ok`},
		{"a\tb\rc\x00d\x7fe", `a\tb\rc\x00d\x7fe`},
		{"c1\u009b31m", `c1\u009b31m`},
		{"abc\u202edef\u2066g\u2069\u200f", `abc\u202edef\u2066g\u2069\u200f`},
		{"line\u2028sep", `line\u2028sep`},
		{"bad\xffutf8\xc3", `bad\xffutf8\xc3`},
	} {
		got := Escape(c.in)
		if got != c.want {
			t.Errorf("Escape(%q) = %q, want %q", c.in, got, c.want)
		}
		for _, r := range got {
			if r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 {
				t.Errorf("Escape(%q) = %q holds %U", c.in, got, r)
			}
		}
	}
}

// TestEscapeUnchangedIsSame: a string with nothing to escape is returned
// as is, without a copy.
func TestEscapeUnchangedIsSame(t *testing.T) {
	s := strings.Repeat("ok ", 10)
	if got := Escape(s); got != s {
		t.Fatalf("Escape changed %q to %q", s, got)
	}
	if n := testing.AllocsPerRun(10, func() { _ = Escape(s) }); n != 0 {
		t.Errorf("Escape of plain text allocates %.0f times", n)
	}
}

func TestStrings(t *testing.T) {
	got := Strings([]string{"a", "b\n"})
	if len(got) != 2 || got[0] != "a" || got[1] != `b\n` {
		t.Errorf("Strings = %q", got)
	}
}
