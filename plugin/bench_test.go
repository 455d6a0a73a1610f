package main

import (
	"testing"
)

// BenchmarkAddDel measures one ADD plus one DEL of the built binary, exec'd
// in a node namespace the way a runtime would (process start included).
func BenchmarkAddDel(b *testing.B) {
	n := newNode(b)
	pod := newNetNS(b)
	conf := n.conf("1.0.0", nil)
	b.ResetTimer()
	for b.Loop() {
		n.run(call{cmd: "ADD", containerID: "bench", netns: pod.Path(), ifName: "eth0", conf: conf}).mustOK(b, "ADD")
		n.run(call{cmd: "DEL", containerID: "bench", netns: pod.Path(), ifName: "eth0", conf: conf}).mustOK(b, "DEL")
	}
}

// BenchmarkAdd measures ADD alone; the DELs run with the timer stopped.
func BenchmarkAdd(b *testing.B) {
	n := newNode(b)
	pod := newNetNS(b)
	conf := n.conf("1.0.0", nil)
	for b.Loop() {
		n.run(call{cmd: "ADD", containerID: "bench", netns: pod.Path(), ifName: "eth0", conf: conf}).mustOK(b, "ADD")
		b.StopTimer()
		n.run(call{cmd: "DEL", containerID: "bench", netns: pod.Path(), ifName: "eth0", conf: conf}).mustOK(b, "DEL")
		b.StartTimer()
	}
}
