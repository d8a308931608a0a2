package coll

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestUniqueIDRoundTrip(t *testing.T) {
	id, err := NewUniqueID("127.0.0.1:29500")
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseUniqueID(id.String())
	if err != nil || back != id {
		t.Fatalf("round trip %v -> %q -> %v, %v", id, id.String(), back, err)
	}
	for _, bad := range []string{"", "zz@1.2.3.4:5", "00@1.2.3.4:5", strings.Repeat("0", 32) + "@nohostport"} {
		if _, err := ParseUniqueID(bad); err == nil {
			t.Errorf("ParseUniqueID(%q) accepted", bad)
		}
	}
	if _, err := NewUniqueID("127.0.0.1:0"); err == nil {
		t.Error("port 0 accepted")
	}
}

// TestBootstrap: 1 to 8 ranks (goroutines) exchange payloads; every rank
// gets every payload in rank order.
func TestBootstrap(t *testing.T) {
	for size := 1; size <= 8; size++ {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			id, err := NewUniqueID(freeAddr(t))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			out := make([][]Peer, size)
			errs := make([]error, size)
			var wg sync.WaitGroup
			for r := range size {
				wg.Add(1)
				go func() {
					defer wg.Done()
					out[r], errs[r] = Bootstrap(ctx, id, r, size, []byte(fmt.Sprintf("rank %d data", r)))
				}()
			}
			wg.Wait()
			for r := range size {
				if errs[r] != nil {
					t.Fatalf("rank %d: %v", r, errs[r])
				}
				for q, p := range out[r] {
					if p.Rank != q || !bytes.Equal(p.Data, []byte(fmt.Sprintf("rank %d data", q))) || p.Host != HostID() {
						t.Fatalf("rank %d sees peer %d as %+v", r, q, p)
					}
				}
				if l := LocalRanks(out[r], r); len(l) != size {
					t.Fatalf("local ranks %v: all ranks share this host", l)
				}
			}
		})
	}
}

// TestBootstrapMissingRanks: a deadline names the ranks rank 0 never heard
// from; a stranger with the wrong magic is refused without disturbing it.
func TestBootstrapMissingRanks(t *testing.T) {
	id, err := NewUniqueID(freeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	var rootErr, leafErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, rootErr = Bootstrap(ctx, id, 0, 4, nil)
	}()
	go func() {
		defer wg.Done()
		_, leafErr = Bootstrap(ctx, id, 2, 4, nil)
	}()
	// A stranger: same address, another magic.
	other := id
	other.Magic[0] ^= 1
	go func() {
		_, _ = Bootstrap(ctx, other, 1, 4, nil)
	}()
	wg.Wait()
	if rootErr == nil || !strings.Contains(rootErr.Error(), "not heard from: ranks 1, 3") {
		t.Fatalf("rank 0: %v; want it to name ranks 1 and 3 (1 came with the wrong magic)", rootErr)
	}
	if leafErr == nil || !strings.Contains(leafErr.Error(), "rank 2") {
		t.Fatalf("rank 2: %v", leafErr)
	}
}

func slurmPort(job string) string {
	return strconv.Itoa(slurmPortBase + int(fnv32("slurm "+job)%slurmPortSpan))
}

func TestFromEnv(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	cases := []struct {
		name string
		get  func(string) string
		flag string
		want Env
		err  string
	}{
		{"torchrun", env("RANK", "3", "WORLD_SIZE", "8", "LOCAL_RANK", "1", "MASTER_ADDR", "10.0.0.1", "MASTER_PORT", "29500"), "",
			Env{Rank: 3, Size: 8, LocalRank: 1, Addr: "10.0.0.1:29501", Launcher: "torchrun"}, ""},
		{"openmpi", env("OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2", "OMPI_COMM_WORLD_LOCAL_RANK", "1", "IBEX_RENDEZVOUS", "h:1"), "",
			Env{Rank: 1, Size: 2, LocalRank: 1, Addr: "h:1", Launcher: "openmpi"}, ""},
		{"slurm", env("SLURM_PROCID", "5", "SLURM_NTASKS", "6", "SLURM_LOCALID", "2"), "node1:7000",
			Env{Rank: 5, Size: 6, LocalRank: 2, Addr: "node1:7000", Launcher: "slurm"}, ""},
		{"mpich", env("PMI_RANK", "0", "PMI_SIZE", "4", "IBEX_RENDEZVOUS", "x:9"), "",
			Env{Rank: 0, Size: 4, Addr: "x:9", Launcher: "mpich"}, ""},
		{"slurm without address", env("SLURM_PROCID", "0", "SLURM_NTASKS", "2"), "", Env{}, "IBEX_RENDEZVOUS"},
		{"rank out of range", env("PMI_RANK", "4", "PMI_SIZE", "4", "IBEX_RENDEZVOUS", "x:9"), "", Env{}, "PMI_RANK=4"},
		{"not a number", env("RANK", "x", "WORLD_SIZE", "2", "MASTER_ADDR", "a", "MASTER_PORT", "1"), "", Env{}, `RANK="x"`},
		{"nothing", env(), "", Env{}, "no launcher environment"},
		// Issue 18: what each launcher provides when no address is given.
		{"torchrun partial", env("RANK", "1", "WORLD_SIZE", "2"), "", Env{}, "without MASTER_ADDR and MASTER_PORT"},
		{"openmpi one host", env("OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2", "OMPI_COMM_WORLD_LOCAL_RANK", "1",
			"OMPI_COMM_WORLD_LOCAL_SIZE", "2", "OMPI_MCA_ess_base_jobid", "2091646977", "PMIX_NAMESPACE", "x", "IBEX_RENDEZVOUS_DIR", "/shared"), "",
			Env{Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, JobID: "2091646977", Launcher: "openmpi",
				File: fmt.Sprintf("/shared/ibex-coll-%d-openmpi-2091646977-2.addr", os.Getuid())}, ""},
		{"openmpi pmix namespace", env("OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "2", "OMPI_MCA_orte_num_nodes", "1",
			"PMIX_NAMESPACE", "ns/1", "IBEX_RENDEZVOUS_DIR", "/d"), "",
			Env{Rank: 0, Size: 2, JobID: "ns/1", Launcher: "openmpi", File: fmt.Sprintf("/d/ibex-coll-%d-openmpi-ns_1-2.addr", os.Getuid())}, ""},
		{"openmpi two hosts", env("OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "4", "OMPI_COMM_WORLD_LOCAL_SIZE", "2",
			"OMPI_MCA_ess_base_jobid", "7"), "", Env{}, "set IBEX_RENDEZVOUS=host:port (ibex coll: --rendezvous host:port)"},
		{"openmpi two hosts, flag", env("OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "4", "OMPI_COMM_WORLD_LOCAL_SIZE", "2",
			"OMPI_MCA_ess_base_jobid", "7"), "h:5", Env{Rank: 0, Size: 4, LocalSize: 2, JobID: "7", Addr: "h:5", Launcher: "openmpi"}, ""},
		{"slurm one node", env("SLURM_PROCID", "2", "SLURM_NTASKS", "3", "SLURM_LOCALID", "2", "SLURM_JOB_ID", "41", "SLURM_STEP_ID", "0",
			"SLURM_NNODES", "1", "SLURM_NODELIST", "n1", "IBEX_RENDEZVOUS_DIR", "/d"), "",
			Env{Rank: 2, Size: 3, LocalRank: 2, LocalSize: 3, JobID: "41.0", Launcher: "slurm", File: fmt.Sprintf("/d/ibex-coll-%d-slurm-41.0-3.addr", os.Getuid())}, ""},
		{"slurm node list", env("SLURM_PROCID", "1", "SLURM_NTASKS", "4", "SLURM_JOB_ID", "41", "SLURM_STEP_ID", "3",
			"SLURM_STEP_NUM_NODES", "2", "SLURM_STEP_NODELIST", "gpu[07-08]", "SLURM_NODELIST", "gpu[01-08]"), "",
			Env{Rank: 1, Size: 4, JobID: "41.3", Launcher: "slurm", Addr: "gpu07:" + slurmPort("41.3"), Listen: ":" + slurmPort("41.3")}, ""},
		{"slurm node list, port", env("SLURM_PROCID", "0", "SLURM_NTASKS", "4", "SLURM_JOB_ID", "41", "SLURM_NODELIST", "a,b",
			"IBEX_RENDEZVOUS_PORT", "9000"), "", Env{Rank: 0, Size: 4, JobID: "41.", Launcher: "slurm", Addr: "a:9000", Listen: ":9000"}, ""},
		{"slurm rank 0 elsewhere", env("SLURM_PROCID", "0", "SLURM_NTASKS", "4", "SLURM_JOB_ID", "41", "SLURM_NODELIST", "a,b",
			"SLURMD_NODENAME", "b"), "", Env{}, "not on the step's first node a"},
		{"slurm bad node list", env("SLURM_PROCID", "0", "SLURM_NTASKS", "4", "SLURM_JOB_ID", "41", "SLURM_NODELIST", "a[3-1]"), "", Env{}, "IBEX_RENDEZVOUS"},
		{"mpich without address", env("PMI_RANK", "0", "PMI_SIZE", "4"), "", Env{}, "IBEX_RENDEZVOUS=host:port"},
	}
	for _, c := range cases {
		got, err := FromEnv(c.get, c.flag)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want one mentioning %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
}

// TestBootstrapHostileInput: garbage on the rendezvous port never crashes
// rank 0 nor stops the real ranks.
func TestBootstrapHostileInput(t *testing.T) {
	id, err := NewUniqueID(freeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 2)
	go func() { _, err := Bootstrap(ctx, id, 0, 2, []byte("root")); done <- err }()
	for _, junk := range [][]byte{{0xff, 0xff, 0xff, 0xff}, []byte("\x00\x00\x00\x05hello"), append([]byte("\x00\x00\x00\x30"), bytes.Repeat([]byte{'I'}, 48)...)} {
		for {
			c, err := net.Dial("tcp", id.Addr)
			if err != nil {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			_, _ = c.Write(junk)
			_ = c.Close()
			break
		}
	}
	go func() { _, err := Bootstrap(ctx, id, 1, 2, []byte("leaf")); done <- err }()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
