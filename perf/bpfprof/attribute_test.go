package main

import (
	"reflect"
	"strings"
	"testing"
)

func TestAttribute(t *testing.T) {
	lines := []lineAddr{{0x1010, "b"}, {0x1000, "a"}, {0x1020, "c"}, {0x1008, "a"}}
	samples := []sample{0x0fff, 0x1000, 0x1004, 0x1009, 0x1010, 0x101f, 0x1020, 0x2000}
	got := attribute(lines, samples)
	want := histogram{total: 7, lines: []lineCount{{"a", 3}, {"b", 2}, {"c", 2}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("attribute = %+v, want %+v", got, want)
	}
}

func TestReadSamples(t *testing.T) {
	in := "ffffffffc0027018 bpf_prog_4caf9d895864e7d5_novaedge_fastpath\n" +
		"ffffffff81000000 veth_xdp_rcv\n" +
		"ffffffffc00270a1 bpf_prog_4caf9d895864e7d5_novaedge_fastpath\n" +
		"\n"
	got, err := readSamples(strings.NewReader(in), "_novaedge_fastpa")
	if err != nil {
		t.Fatal(err)
	}
	if want := []sample{0xffffffffc0027018, 0xffffffffc00270a1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("readSamples = %x, want %x", got, want)
	}
	if _, err := readSamples(strings.NewReader("zz bpf_prog_x_novaedge_fastpath\n"), "_novaedge_fastpa"); err == nil {
		t.Fatal("a malformed address was accepted")
	}
}
