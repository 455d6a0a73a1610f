package state

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzWorkloadRecord writes arbitrary bytes as a workload record and reads
// them back through GetWorkload and ListWorkloads: no panic, and a record
// that loads is valid and survives a write/read round trip.
func FuzzWorkloadRecord(f *testing.F) {
	for _, s := range []string{
		`{"version":1,"containerID":"abc","ifName":"eth0","hostIface":"cali0123456789a","netns":"/x","ips":["10.0.0.5/32","fd00::5/128"],"containerMAC":"02:00:00:00:00:01","created":"2026-01-01T00:00:00Z"}`,
		`{"version":2,"containerID":"abc","ifName":"eth0"}`,
		`{"version":1,"containerID":"abc","ifName":"eth0","hostIface":"","ips":null}`,
		`{"version":1,"containerID":"abc","ifName":"eth0","hostIface":"x","ips":["::ffff:10.0.0.5/128"],"created":"bogus"}`,
		`null`, `[]`, `{}`, "\x00",
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	s, err := Open(filepath.Join(dir, "state"))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(filepath.Join(s.WorkloadsDir(), "abc_eth0.json"), data, 0o600); err != nil {
			t.Fatal(err)
		}
		w, err := s.GetWorkload("abc", "eth0")
		good, bad := s.ListWorkloads()
		if (err == nil) != (len(good) == 1) || len(good)+len(bad) != 1 {
			t.Fatalf("GetWorkload err %v, but ListWorkloads good %d bad %v", err, len(good), bad)
		}
		if err != nil {
			return
		}
		if w.Version != RecordVersion || w.ContainerID != "abc" || w.IfName != "eth0" {
			t.Fatalf("loaded %+v", w)
		}
		if err := s.PutWorkload(w); err != nil {
			t.Fatalf("a record that loads does not store again: %v", err)
		}
		if _, err := s.GetWorkload("abc", "eth0"); err != nil {
			t.Fatalf("round trip: %v", err)
		}
	})
}
