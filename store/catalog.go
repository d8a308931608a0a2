package store

import (
	"encoding/binary"
	"fmt"
	"io/fs"
	"path/filepath"
)

// scanDir lists the regular files under dir, recursively, in lexical
// order, with names relative to dir ('/'-separated). Symbolic links,
// devices and the like are skipped.
func scanDir(dir string) ([]FileInfo, error) {
	var files []FileInfo
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if len(rel) > 0xffff {
			return fmt.Errorf("%s: name of %d bytes, at most 65535", path, len(rel))
		}
		files = append(files, FileInfo{Name: filepath.ToSlash(rel), Size: fi.Size()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: scan %s: %w", dir, err)
	}
	return files, nil
}

// The file list a client reads (RDMA READ) at Dial:
//
//	0   u32 count
//	4   per file: u64 size, u16 name length, name bytes
func catalogLen(files []FileInfo) int {
	n := 4
	for _, f := range files {
		n += 10 + len(f.Name)
	}
	return n
}

func encodeCatalog(b []byte, files []FileInfo) {
	binary.LittleEndian.PutUint32(b, uint32(len(files)))
	p := 4
	for _, f := range files {
		binary.LittleEndian.PutUint64(b[p:], uint64(f.Size))
		binary.LittleEndian.PutUint16(b[p+8:], uint16(len(f.Name)))
		p += 10 + copy(b[p+10:], f.Name)
	}
}

func decodeCatalog(b []byte, want int) ([]FileInfo, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: file list of %d bytes", ErrProtocol, len(b))
	}
	n := int(binary.LittleEndian.Uint32(b))
	if n != want {
		return nil, fmt.Errorf("%w: file list has %d files, the server said %d", ErrProtocol, n, want)
	}
	files := make([]FileInfo, 0, n)
	p := 4
	for i := 0; i < n; i++ {
		if len(b)-p < 10 {
			return nil, fmt.Errorf("%w: file list ends in entry %d", ErrProtocol, i)
		}
		size := int64(binary.LittleEndian.Uint64(b[p:]))
		l := int(binary.LittleEndian.Uint16(b[p+8:]))
		p += 10
		if size < 0 || len(b)-p < l {
			return nil, fmt.Errorf("%w: file list entry %d: size %d, name of %d bytes", ErrProtocol, i, size, l)
		}
		files = append(files, FileInfo{Name: string(b[p : p+l]), Size: size})
		p += l
	}
	if p != len(b) {
		return nil, fmt.Errorf("%w: %d bytes after the file list", ErrProtocol, len(b)-p)
	}
	return files, nil
}
