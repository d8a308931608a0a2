package oob

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The transcripts in testdata/recorded are what two real perftest 4.5+0.17
// programs sent each other (over fakeverbs, see convert.py). Here one of the
// two is replaced by an ibex end fed with that program's own dests, sizes
// and reports, and every byte it sends must equal the recorded one.
func TestRecorded(t *testing.T) {
	files, _ := filepath.Glob("testdata/recorded/*.txt")
	if len(files) == 0 {
		t.Fatal("no recordings")
	}
	for _, f := range files {
		tr := loadTranscript(t, f)
		for _, ibexClient := range []bool{true, false} {
			role := "ibex-server"
			if ibexClient {
				role = "ibex-client"
			}
			t.Run(tr.name+"/"+role, func(t *testing.T) { testRecorded(t, tr, ibexClient) })
		}
	}
}

// recordedInputs recovers one side's inputs from its messages.
func recordedInputs(t *testing.T, tr transcript, client bool) (Params, []Dest, []Report) {
	var mine [][]byte
	for _, l := range tr.lines {
		if l.client == client {
			mine = append(mine, l.msg)
		}
	}
	p := scenarioParams(tr, client)
	p.CycleBuffer, p.CacheLineSize = decodeInt32(mine[1]), decodeInt32(mine[2])
	mtu, err := parseMTU(mine[3])
	if err != nil {
		t.Fatal(err)
	}
	p.MTU = mtu
	var dests []Dest
	var reports []Report
	var f [5][8]byte
	n := 0
	for _, m := range mine[4:] {
		switch len(m) {
		case keyMsgSize, keyMsgSizeGID:
			if len(dests) < p.Test.QPs {
				d, err := parseDest(m)
				if err != nil {
					t.Fatalf("recorded dest: %v", err)
				}
				dests = append(dests, d)
			}
		case 8:
			copy(f[n][:], m)
			if n++; n == 5 {
				reports = append(reports, reportFrom(f))
				n = 0
			}
		}
	}
	return p, dests, reports
}

func testRecorded(t *testing.T, tr transcript, ibexClient bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peerErr := make(chan error, 1)
	var c *Conn
	if ibexClient {
		go func() {
			nc, err := ln.ln.Accept()
			if err != nil {
				peerErr <- err
				return
			}
			defer nc.Close()
			peerErr <- playPerftest(nc, tr, false)
		}()
		c, err = Dial(ctx, ln.Addr().String())
	} else {
		go func() {
			nc, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				peerErr <- err
				return
			}
			defer nc.Close()
			peerErr <- playPerftest(nc, tr, true)
		}()
		c, err = ln.Accept(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, dests, reports := recordedInputs(t, tr, ibexClient)
	_, remote, _, err := runIbexWith(ctx, c, p, dests, reports)
	if perr := <-peerErr; perr != nil {
		t.Errorf("recorded perftest side: %v", perr)
	}
	if err != nil {
		t.Fatalf("ibex side: %v", err)
	}
	_, want, _ := recordedInputs(t, tr, !ibexClient)
	for i := range want {
		if remote[i] != want[i] {
			t.Errorf("remote dest %d: %v, want %v", i, remote[i], want[i])
		}
	}
	if strings.Contains(tr.name, "write_bw") && remote[0].OutReads != 1 {
		t.Errorf("ib_write_bw sends out_reads %d, want 1", remote[0].OutReads)
	}
}
