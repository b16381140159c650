// Package fswatch reports changes of files in directories through inotify,
// telling a file still being written from one that is complete.
//
// fsnotify, which the agent used before, reports a file closed after
// writing and a file renamed into place as a plain write and create, so a
// watcher that must never read a half-written configuration has to wait
// out a long quiet period after every event. inotify itself says when a
// writer closed the file (IN_CLOSE_WRITE) and when a finished file was
// renamed into place (IN_MOVED_TO, also how Kubernetes swaps a ConfigMap
// volume's "..data" link), so the common atomic save can be read at once.
package fswatch

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Op is what happened to a name in a watched directory.
type Op int

const (
	// Writing: the file was created or written to and may be written
	// further (IN_CREATE, IN_MODIFY).
	Writing Op = iota + 1
	// Complete: a writer closed the file (IN_CLOSE_WRITE), or a directory
	// was created.
	Complete
	// Gone: the name was removed or renamed away (IN_DELETE, IN_MOVED_FROM).
	Gone
	// Overflow: the kernel's queue overflowed and events were lost
	// (IN_Q_OVERFLOW; Name is empty).
	Overflow
	// Moved: a name was renamed into place (IN_MOVED_TO), complete like
	// Complete, and in one step: an atomic save, or a ConfigMap volume's
	// "..data" link swapped. A reader sees the old bytes or the new ones,
	// never a mix, so a watcher may act on it at once.
	Moved
)

func (o Op) String() string {
	switch o {
	case Writing:
		return "writing"
	case Complete:
		return "complete"
	case Gone:
		return "gone"
	case Overflow:
		return "overflow"
	case Moved:
		return "moved"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Event is one change: the full path of the name it concerns.
type Event struct {
	Name string
	Op   Op
}

const mask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_MOVED_TO |
	unix.IN_MOVED_FROM | unix.IN_DELETE | unix.IN_ONLYDIR

// Watcher watches directories. Events and Errors are closed after Close.
type Watcher struct {
	Events chan Event
	Errors chan error

	f    *os.File
	mu   sync.Mutex
	dirs map[int32]string // watch descriptor → directory
	quit chan struct{}    // closed by Close: stop sending
	done chan struct{}
}

// New starts a watcher with no directories.
func New() (*Watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	// Non-blocking: os.File reads through the runtime's poller, so Close
	// ends a pending read.
	w := &Watcher{
		Events: make(chan Event, 64),
		Errors: make(chan error, 1),
		f:      os.NewFile(uintptr(fd), "inotify"),
		dirs:   map[int32]string{},
		quit:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	go w.read()
	return w, nil
}

// Add watches the entries of directory dir.
func (w *Watcher) Add(dir string) error {
	raw, err := w.f.SyscallConn()
	if err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	var wd int
	var werr error
	if err := raw.Control(func(fd uintptr) { wd, werr = unix.InotifyAddWatch(int(fd), dir, mask) }); err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	if werr != nil {
		return fmt.Errorf("watch %s: %w", dir, werr)
	}
	w.mu.Lock()
	w.dirs[int32(wd)] = dir
	w.mu.Unlock()
	return nil
}

// Close stops the watcher and waits until Events and Errors are closed.
// Events not yet received are dropped.
func (w *Watcher) Close() error {
	close(w.quit)
	err := w.f.Close()
	<-w.done
	return err
}

func (w *Watcher) read() {
	defer close(w.done)
	defer close(w.Errors)
	defer close(w.Events)
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := w.f.Read(buf)
		if errors.Is(err, os.ErrClosed) {
			return
		}
		if err != nil {
			select {
			case w.Errors <- fmt.Errorf("read inotify events: %w", err):
			case <-w.quit:
			}
			return
		}
		if !w.parse(buf[:n]) {
			return
		}
	}
}

// parse sends the events of one read: whole inotify_event records, each
// followed by its NUL-padded name. False: the watcher is closing.
func (w *Watcher) parse(b []byte) bool {
	for len(b) >= unix.SizeofInotifyEvent {
		raw := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(raw.Len)
		if end > len(b) {
			return true // the kernel writes whole records; a short one is a bug
		}
		name := b[unix.SizeofInotifyEvent:end]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		ev, ok := w.event(raw.Wd, raw.Mask, string(name))
		b = b[end:]
		if !ok {
			continue
		}
		select {
		case w.Events <- ev:
		case <-w.quit:
			return false
		}
	}
	return true
}

func (w *Watcher) event(wd int32, m uint32, name string) (Event, bool) {
	if m&unix.IN_Q_OVERFLOW != 0 {
		return Event{Op: Overflow}, true
	}
	w.mu.Lock()
	dir, ok := w.dirs[wd]
	if m&unix.IN_IGNORED != 0 {
		delete(w.dirs, wd) // the directory is gone, and its watch with it
	}
	w.mu.Unlock()
	if !ok || name == "" {
		return Event{}, false // about the directory itself
	}
	ev := Event{Name: dir + string(os.PathSeparator) + name}
	switch {
	case m&unix.IN_MOVED_TO != 0:
		ev.Op = Moved
	case m&unix.IN_CLOSE_WRITE != 0:
		ev.Op = Complete
	case m&(unix.IN_DELETE|unix.IN_MOVED_FROM) != 0:
		ev.Op = Gone
	case m&unix.IN_CREATE != 0 && m&unix.IN_ISDIR != 0:
		// A directory holds no bytes of its own to wait for.
		ev.Op = Complete
	case m&(unix.IN_CREATE|unix.IN_MODIFY) != 0:
		ev.Op = Writing
	default:
		return Event{}, false
	}
	return ev, true
}
