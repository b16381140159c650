package cli

import (
	"fmt"
	"io"
)

// printer writes formatted output and keeps the first write error, so a
// run of writes is checked once at the end, as with bufio.Writer.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) printf(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

func (p *printer) println(args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintln(p.w, args...)
	}
}
