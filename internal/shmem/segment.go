//go:build linux

package shmem

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// NamePrefix starts the name of every memfd this package creates, so that
// /proc/PID/maps and /proc/PID/fd show which mappings are ibex segments.
const NamePrefix = "ibex-shm:"

// maxNameLen is MFD_NAME_MAX_LEN: NAME_MAX minus the "memfd:" prefix the
// kernel adds.
const maxNameLen = 255 - len("memfd:")

// Segment is a memfd mapped MAP_SHARED read/write.
//
// A Segment is not safe for concurrent Close; the bytes of Mem are shared
// with other processes, so access them with atomics or under a protocol.
type Segment struct {
	FD  int    // the memfd (owned by the Segment; -1 after Close)
	Mem []byte // the whole mapping
}

// Create makes a memfd named name (NamePrefix is added unless name already
// starts with it; the name shows in /proc/PID/maps as /memfd:NAME), sized to
// size bytes, sealed against shrinking, growing and further sealing, and
// mapped MAP_SHARED read/write.
//
// The file is sparse: memfd is VM_NORESERVE, so a huge size (64 GiB) costs
// nothing until pages are touched. The shrink seal is what makes handing the
// descriptor to a peer safe: nobody, including us, can truncate the file
// under another process's mapping and make its next access SIGBUS.
func Create(name string, size int64) (*Segment, error) {
	if !strings.HasPrefix(name, NamePrefix) {
		name = NamePrefix + name
	}
	if len(name) > maxNameLen {
		return nil, fmt.Errorf("shmem: create %q: name is %d bytes, the kernel allows %d", name, len(name), maxNameLen)
	}
	if size <= 0 {
		return nil, fmt.Errorf("shmem: create %q: size %d must be positive", name, size)
	}
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("shmem: create %q: memfd_create: %w", name, err)
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shmem: create %q: ftruncate to %d bytes: %w", name, size, err)
	}
	// F_SEAL_SEAL last, so the set can never be loosened again.
	const seals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shmem: create %q: add seals: %w", name, err)
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shmem: create %q: mmap %d bytes: %w", name, size, err)
	}
	return &Segment{FD: fd, Mem: mem}, nil
}

// Map maps the whole of a memfd received from another process. It takes
// ownership of fd: the Segment closes it, and so does Map when it fails.
//
// Map refuses a descriptor without F_SEAL_SHRINK (or one that cannot be
// sealed at all, i.e. not a memfd): its owner could truncate it while we
// have it mapped, and our next access would SIGBUS.
func Map(fd int) (*Segment, error) {
	seg, err := mapFD(fd)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return seg, nil
}

func mapFD(fd int) (*Segment, error) {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		if errors.Is(err, unix.EINVAL) {
			return nil, fmt.Errorf("shmem: map fd %d: not a sealable memfd (F_GET_SEALS: %w)", fd, err)
		}
		return nil, fmt.Errorf("shmem: map fd %d: F_GET_SEALS: %w", fd, err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return nil, fmt.Errorf("shmem: map fd %d: memfd is not sealed with F_SEAL_SHRINK (seals %#x): its owner could truncate it under our mapping and crash us with SIGBUS", fd, seals)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("shmem: map fd %d: fstat: %w", fd, err)
	}
	if st.Size <= 0 {
		return nil, fmt.Errorf("shmem: map fd %d: memfd is empty", fd)
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shmem: map fd %d: mmap %d bytes: %w", fd, st.Size, err)
	}
	return &Segment{FD: fd, Mem: mem}, nil
}

// Close unmaps the segment and closes its descriptor. Closing twice is a
// no-op. Other processes' mappings are unaffected; the memory is freed when
// the last mapping and descriptor anywhere are gone.
func (s *Segment) Close() error {
	var errs []error
	if s.Mem != nil {
		if err := unix.Munmap(s.Mem); err != nil {
			errs = append(errs, fmt.Errorf("shmem: munmap: %w", err))
		}
		s.Mem = nil
	}
	if s.FD >= 0 {
		if err := unix.Close(s.FD); err != nil {
			errs = append(errs, fmt.Errorf("shmem: close fd %d: %w", s.FD, err))
		}
		s.FD = -1
	}
	return errors.Join(errs...)
}

// PunchHole gives the pages backing [off, off+n) back to the kernel; they
// read as zero afterwards, in every process that maps the segment. Partial
// pages at either end are zeroed rather than freed. Touching a released page
// through any mapping, even to read it, allocates it again (shmem has no
// shared zero page), so punch only what nobody will look at until reuse.
func (s *Segment) PunchHole(off, n int64) error {
	if off < 0 || n < 0 || off > int64(len(s.Mem)) || n > int64(len(s.Mem))-off {
		return fmt.Errorf("shmem: punch hole [%d, +%d): outside the %d-byte segment", off, n, len(s.Mem))
	}
	if n == 0 {
		return nil
	}
	if err := unix.Fallocate(s.FD, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n); err != nil {
		return fmt.Errorf("shmem: punch hole [%d, +%d) in fd %d: %w", off, n, s.FD, err)
	}
	return nil
}
