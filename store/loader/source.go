package loader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ibex-rdma/ibex/store"
)

// Source is where a Loader reads from. store.Client implements it; so does
// LocalSource.
type Source interface {
	// Files lists the files, in an order that does not change: an Extent's
	// File indexes it.
	Files() []store.FileInfo
	// Alloc returns n bytes of memory reads may target (a store client
	// registers it once). A Loader calls it once, at New.
	Alloc(n int) ([]byte, error)
	// ReadBatch reads each extent into the matching dst (len(dst[i]) ==
	// exts[i].Len). It is safe for concurrent use and honours ctx. An error
	// that wraps an *ExtentError or a *store.RangeError says which extent
	// failed; otherwise the Loader reads the extents one by one to find
	// out.
	ReadBatch(ctx context.Context, exts []store.Extent, dst [][]byte) error
}

// ExtentError is a read of one extent that failed: Index is its position in
// the ReadBatch call. A Source may wrap one in its error to say which extent
// failed; the Loader otherwise finds out by reading the batch's extents one
// by one.
type ExtentError struct {
	Index int
	Name  string // the file's name, if the Source knows it
	Off   int64
	Len   int
	Err   error
}

func (e *ExtentError) Error() string {
	return fmt.Sprintf("extent %d: %q offset %d len %d: %v", e.Index, e.Name, e.Off, e.Len, e.Err)
}

func (e *ExtentError) Unwrap() error { return e.Err }

// Local reads files of a local directory with pread: the baseline a remote
// Source is compared with. Make one with LocalSource.
type Local struct {
	dir   string
	files []store.FileInfo
	fds   []*os.File
}

// LocalSource opens every regular file under dir (recursively; names are
// slash-separated paths relative to dir, sorted) and keeps them open until
// Close. Alloc is make: local reads need no registration.
func LocalSource(dir string) (*Local, error) {
	l := &Local{dir: dir}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return err
		}
		l.files = append(l.files, store.FileInfo{Name: filepath.ToSlash(rel), Size: st.Size()})
		l.fds = append(l.fds, f)
		return nil
	})
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("loader: local source %s: %w", dir, err)
	}
	// WalkDir's order is per directory ("a/b" before "a.bin"); sort by the
	// whole name, the order Files promises.
	type pair struct {
		fi store.FileInfo
		f  *os.File
	}
	ps := make([]pair, len(l.files))
	for i := range ps {
		ps[i] = pair{l.files[i], l.fds[i]}
	}
	slices.SortFunc(ps, func(a, b pair) int { return strings.Compare(a.fi.Name, b.fi.Name) })
	for i, p := range ps {
		l.files[i], l.fds[i] = p.fi, p.f
	}
	return l, nil
}

// Files lists the directory's regular files, sorted by name.
func (l *Local) Files() []store.FileInfo { return l.files }

// Alloc returns make([]byte, n).
func (l *Local) Alloc(n int) ([]byte, error) {
	if n < 0 {
		return nil, fmt.Errorf("loader: local source: alloc %d bytes", n)
	}
	return make([]byte, n), nil
}

// ReadBatch preads each extent; a failure is an *ExtentError naming the file
// and offset (a short read: io.ErrUnexpectedEOF).
func (l *Local) ReadBatch(ctx context.Context, exts []store.Extent, dst [][]byte) error {
	if len(dst) != len(exts) {
		return fmt.Errorf("loader: local source: %d extents, %d buffers", len(exts), len(dst))
	}
	for i, e := range exts {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := l.read(e, dst[i]); err != nil {
			return &ExtentError{Index: i, Name: l.name(e.File), Off: e.Off, Len: e.Len, Err: err}
		}
	}
	return nil
}

func (l *Local) read(e store.Extent, b []byte) error {
	switch {
	case e.File < 0 || e.File >= len(l.fds):
		return fmt.Errorf("file %d: not one of %d files", e.File, len(l.fds))
	case len(b) != e.Len:
		return fmt.Errorf("buffer of %d bytes for %d", len(b), e.Len)
	}
	n, err := l.fds[e.File].ReadAt(b, e.Off)
	if n == len(b) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return err
}

func (l *Local) name(file int) string {
	if file < 0 || file >= len(l.files) {
		return fmt.Sprintf("#%d", file)
	}
	return l.files[file].Name
}

// Close closes the files.
func (l *Local) Close() error {
	var first error
	for _, f := range l.fds {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	l.fds = nil
	return first
}
