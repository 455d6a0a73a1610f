package main

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHelpListsEverySubcommand: `routeletd -h` and the command's package
// documentation name every subcommand routeletd runs.
func TestHelpListsEverySubcommand(t *testing.T) {
	out, err := exec.Command(filepath.Join(binDir, "routeletd"), "-h").CombinedOutput()
	if code := exitCode(err); code != 0 {
		t.Fatalf("routeletd -h: exit %d (%s)", code, out)
	}
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	doc := f.Doc.Text()
	for name := range commands {
		if !strings.Contains(string(out), "routeletd "+name+" ") && !strings.Contains(string(out), "routeletd "+name+"\n") {
			t.Errorf("routeletd -h does not list %q:\n%s", name, out)
		}
		if !strings.Contains(doc, "routeletd "+name+" ") {
			t.Errorf("the package documentation in main.go does not list %q:\n%s", name, doc)
		}
	}
}
