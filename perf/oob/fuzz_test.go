package oob

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"
)

func FuzzParseDest(f *testing.F) {
	f.Add([]byte("0000:0010:000100:100000:c1000000:00007f0000001000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:00:00:01:00000000:\x00"))
	f.Add([]byte("0001:0004:00abcd:123456:89abcdef:00007F0000001000:00000001\x00"))
	f.Add([]byte("done\x00"))
	f.Add(bytes.Repeat([]byte(":"), keyMsgSizeGID))
	f.Add(bytes.Repeat([]byte("0"), keyMsgSize))
	f.Fuzz(func(t *testing.T, msg []byte) {
		d, err := parseDest(msg)
		if err != nil {
			return
		}
		gid := len(msg) == keyMsgSizeGID
		again, err := appendDest(nil, d, gid)
		if err != nil {
			t.Fatalf("parsed %q into %+v, which does not encode: %v", msg, d, err)
		}
		if !bytes.Equal(again, bytes.ToLower(msg)) {
			t.Fatalf("parsed %q, encodes back as %q", msg, again)
		}
		if d2, err := parseDest(again); err != nil || d2 != d {
			t.Fatalf("round trip %+v -> %+v, %v", d, d2, err)
		}
	})
}

func FuzzParseVersion(f *testing.F) {
	f.Add(perftestVersion())
	f.Add(encodeVersion())
	f.Add([]byte("5.60\x00ibex"))
	f.Add([]byte(" 6.06abc"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > versionSize {
			b = b[:versionSize]
		}
		parseVersion(b)
		parseMTU(b[:min(len(b), mtuSize)])
		if len(b) >= testMsgSize {
			parseTest(b[:testMsgSize])
		}
	})
}

// FuzzPeer runs a whole client against a peer that answers with arbitrary
// bytes: every outcome must be an error or success within the deadline,
// never a panic or a hang.
func FuzzPeer(f *testing.F) {
	tr := loadTranscript(f, "testdata/write_bw_1qp.txt")
	var script []byte
	for _, l := range tr.lines {
		if !l.client {
			script = append(script, l.msg...)
		}
	}
	f.Add(script)
	f.Add(script[:40])
	f.Add(append(append([]byte{}, script[:24]...), "\xff\xff\xff\xff9\x00"...))
	f.Fuzz(func(t *testing.T, answer []byte) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Skip(err)
		}
		defer ln.Close()
		peerDone := make(chan struct{})
		go func() {
			defer close(peerDone)
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			defer nc.Close()
			go io.Copy(io.Discard, nc)
			nc.Write(answer)
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c, err := Dial(ctx, ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		runIbex(ctx, c, scenarioParams(tr, true))
		c.Close()
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("took %v", d)
		}
		<-peerDone
	})
}
