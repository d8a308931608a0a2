//go:build linux

package shmem

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// SendFDs writes msg with the descriptors fds attached (SCM_RIGHTS) in one
// sendmsg. The descriptors stay open here; the receiver gets its own.
//
// On a SOCK_STREAM socket the descriptors arrive with the first byte of msg,
// so keep msg non-empty (Go sends one zero byte in place of an empty msg)
// and let the receiver read it with RecvFDs. SOCK_SEQPACKET keeps message
// boundaries and is the better fit.
func SendFDs(c *net.UnixConn, msg []byte, fds ...int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, oobn, err := c.WriteMsgUnix(msg, oob, nil)
	if err != nil {
		return fmt.Errorf("shmem: send %d bytes with %d fds: %w", len(msg), len(fds), err)
	}
	if (len(msg) > 0 && n != len(msg)) || oobn != len(oob) {
		return fmt.Errorf("shmem: send %d bytes with %d fds: short write (%d bytes, %d of %d control bytes)",
			len(msg), len(fds), n, oobn, len(oob))
	}
	return nil
}

// RecvFDs reads one message into buf and up to maxFDs descriptors sent with
// it, which are close-on-exec (Go receives with MSG_CMSG_CLOEXEC on Linux)
// and owned by the caller. Descriptors beyond maxFDs are closed, so a
// misbehaving peer cannot make us leak them. A message longer than buf on a
// SOCK_SEQPACKET or datagram socket is an error, and its descriptors are
// closed too.
func RecvFDs(c *net.UnixConn, buf []byte, maxFDs int) (n int, fds []int, err error) {
	var oob []byte
	if maxFDs > 0 {
		oob = make([]byte, unix.CmsgSpace(maxFDs*4))
	}
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if oobn > 0 {
		// Parse even on error: the kernel may have installed descriptors
		// that only we can close.
		fds, err = appendRights(fds, oob[:oobn], err)
	}
	if err == nil && flags&unix.MSG_TRUNC != 0 {
		err = fmt.Errorf("shmem: recv: message longer than the %d-byte buffer", len(buf))
	}
	if err != nil {
		closeAll(fds)
		return n, nil, err
	}
	// CmsgSpace rounds up, so the kernel may have passed one more than asked;
	// what did not fit at all it closed itself (MSG_CTRUNC).
	if len(fds) > maxFDs {
		closeAll(fds[maxFDs:])
		fds = fds[:maxFDs]
	}
	return n, fds, nil
}

// appendRights collects the descriptors of every SCM_RIGHTS message in oob.
func appendRights(fds []int, oob []byte, err error) ([]int, error) {
	msgs, perr := unix.ParseSocketControlMessage(oob)
	if perr != nil {
		return fds, errors.Join(err, fmt.Errorf("shmem: recv: control message: %w", perr))
	}
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_RIGHTS {
			continue
		}
		rights, perr := unix.ParseUnixRights(&m)
		if perr != nil {
			err = errors.Join(err, fmt.Errorf("shmem: recv: SCM_RIGHTS: %w", perr))
			continue
		}
		fds = append(fds, rights...)
	}
	return fds, err
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
