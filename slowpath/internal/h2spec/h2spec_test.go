package h2spec

import (
	"strings"
	"testing"
)

func TestParseJUnit(t *testing.T) {
	const report = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites>
  <testsuite package="http2/3.5" name="3.5. HTTP/2 Connection Preface">
    <testcase classname="Sends client connection preface"></testcase>
    <testcase classname="Sends invalid connection preface"><error>Expected: GOAWAY
Actual: DATA` + "\x01\x02" + `</error></testcase>
  </testsuite>
  <testsuite package="http2/6.5" name="6.5. SETTINGS">
    <testcase classname="Sends a SETTINGS frame"><failure>timeout</failure></testcase>
    <testcase classname="Skipped one"><skipped/></testcase>
  </testsuite>
</testsuites>`
	res, err := parseJUnit([]byte(report))
	if err != nil {
		t.Fatal(err)
	}
	if res.Total != 4 || res.Passed() != 1 || len(res.Failed) != 2 || len(res.Skipped) != 1 {
		t.Fatalf("total %d passed %d failed %d skipped %d, want 4 1 2 1", res.Total, res.Passed(), len(res.Failed), len(res.Skipped))
	}
	if c := res.Failed[0]; c.ID != "http2/3.5/2" || c.Desc != "Sends invalid connection preface" || !strings.Contains(c.Detail, "Actual: DATA??") {
		t.Fatalf("first failure %+v", c)
	}
	if c := res.Failed[1]; c.ID != "http2/6.5/1" || c.Detail != "timeout" {
		t.Fatalf("second failure %+v", c)
	}
	p := res.Problems()
	for _, want := range []string{"3 of 4 cases did not pass", "FAIL http2/3.5/2", "SKIP http2/6.5/2"} {
		if !strings.Contains(p, want) {
			t.Errorf("Problems() lacks %q:\n%s", want, p)
		}
	}
	if (Result{Total: 3}).Problems() != "" {
		t.Error("Problems() is not empty when every case passed")
	}
	if _, err := parseJUnit([]byte("<testsuites><testsuite")); err == nil {
		t.Error("a truncated report parsed")
	}
}

func TestBin(t *testing.T) {
	bin, err := Bin()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(bin, "/bin/tools/h2spec") {
		t.Fatalf("Bin() = %s", bin)
	}
}
