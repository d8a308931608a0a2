package coll

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Under a launcher (mpirun, srun, torchrun) every rank must find rank 0
// from what the launcher provides, or fail saying what to set: a rank
// that made up a job of its own would run a second, smaller job beside
// the real one.

// rendezvousHint is what every "no rendezvous" error tells the user.
const rendezvousHint = "set IBEX_RENDEZVOUS=host:port (ibex coll: --rendezvous host:port), an address of rank 0's host that every rank reaches; rank 0 listens there"

// slurmPortBase and slurmPortSpan: the port of a Slurm step's rendezvous
// on its first node is derived from the job and step ids, below Linux's
// ephemeral range (32768-60999) so that no outgoing connection holds it.
const (
	slurmPortBase = 12000
	slurmPortSpan = 20000
)

// launcherRendezvous fills e.Addr (or e.File, e.Listen) from the
// launcher's variables when rendezvous (the flag or IBEX_RENDEZVOUS) is
// empty, and e.LocalSize and e.JobID where the launcher gives them.
func launcherRendezvous(getenv func(string) string, e *Env, rendezvous string) error {
	first := func(names ...string) string {
		for _, n := range names {
			if v := getenv(n); v != "" {
				return v
			}
		}
		return ""
	}
	atoi := func(names ...string) int {
		n, _ := strconv.Atoi(first(names...))
		return n
	}
	place := fmt.Sprintf("rank %d of %d", e.Rank, e.Size)
	switch e.Launcher {
	case "torchrun":
		e.LocalSize = atoi("LOCAL_WORLD_SIZE")
		e.JobID = getenv("TORCHELASTIC_RUN_ID")
		if rendezvous != "" {
			break
		}
		host, port := getenv("MASTER_ADDR"), getenv("MASTER_PORT")
		if host == "" || port == "" {
			return fmt.Errorf("coll: torchrun environment (RANK=%d WORLD_SIZE=%d) without MASTER_ADDR and MASTER_PORT (MASTER_ADDR=%q MASTER_PORT=%q): set both, as torchrun does, or IBEX_RENDEZVOUS=host:port", e.Rank, e.Size, host, port)
		}
		// torchrun's own store uses MASTER_PORT; ibex rendezvous on the
		// next port.
		p, err := strconv.Atoi(port)
		if err != nil || p < 1 || p > 65534 {
			return fmt.Errorf("coll: MASTER_PORT=%q is not a port", port)
		}
		rendezvous = net.JoinHostPort(host, strconv.Itoa(p+1))
	case "openmpi":
		e.LocalSize = atoi("OMPI_COMM_WORLD_LOCAL_SIZE")
		e.JobID = first("OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "OMPI_MCA_orte_ess_jobid")
		if rendezvous != "" {
			break
		}
		nodes := atoi("OMPI_MCA_orte_num_nodes")
		oneHost := e.Size == 1 || e.LocalSize == e.Size || (e.LocalSize == 0 && nodes == 1)
		if !oneHost {
			return fmt.Errorf("coll: Open MPI job (%s) on more than one host (OMPI_COMM_WORLD_LOCAL_SIZE=%s) and no rendezvous address: %s",
				place, getenv("OMPI_COMM_WORLD_LOCAL_SIZE"), rendezvousHint)
		}
		if e.JobID == "" {
			return fmt.Errorf("coll: Open MPI job (%s) on one host without a job id (OMPI_MCA_ess_base_jobid, PMIX_NAMESPACE) and no rendezvous address: %s", place, rendezvousHint)
		}
		e.File = rendezvousFile(getenv, e)
		return nil
	case "slurm":
		job, step := first("SLURM_JOB_ID", "SLURM_JOBID"), first("SLURM_STEP_ID", "SLURM_STEPID")
		if job != "" {
			e.JobID = job + "." + step
		}
		if rendezvous != "" {
			break
		}
		nodes := atoi("SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES")
		list := first("SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST")
		var hosts []string
		if list != "" {
			var err error
			if hosts, err = ExpandNodeList(list); err != nil {
				return fmt.Errorf("coll: Slurm node list %q: %w; or %s", list, err, rendezvousHint)
			}
			if nodes == 0 {
				nodes = len(hosts)
			}
		}
		switch {
		case e.Size == 1 || nodes == 1:
			if e.JobID == "" {
				return fmt.Errorf("coll: Slurm step (%s) on one node without SLURM_JOB_ID and no rendezvous address: %s", place, rendezvousHint)
			}
			e.LocalSize = e.Size
			e.File = rendezvousFile(getenv, e)
			return nil
		case len(hosts) == 0:
			return fmt.Errorf("coll: Slurm step (%s) on %s nodes without SLURM_NODELIST and no rendezvous address: %s", place, orUnknown(nodes), rendezvousHint)
		case e.JobID == "" && getenv("IBEX_RENDEZVOUS_PORT") == "":
			return fmt.Errorf("coll: Slurm step (%s) on %d nodes without SLURM_JOB_ID (to derive the port from) and no rendezvous address: set IBEX_RENDEZVOUS_PORT=port, or %s", place, nodes, rendezvousHint)
		}
		port := slurmPortBase + int(fnv32("slurm "+e.JobID)%slurmPortSpan)
		if v := getenv("IBEX_RENDEZVOUS_PORT"); v != "" {
			p, err := strconv.Atoi(v)
			if err != nil || p < 1 || p > 65535 {
				return fmt.Errorf("coll: IBEX_RENDEZVOUS_PORT=%q is not a port", v)
			}
			port = p
		}
		// Slurm gives rank 0 (SLURM_PROCID 0) the step's first node.
		if name := getenv("SLURMD_NODENAME"); e.Rank == 0 && name != "" && name != hosts[0] {
			return fmt.Errorf("coll: Slurm rank 0 runs on %s, not on the step's first node %s (SLURM_STEP_NODELIST=%s), where the other ranks look for it: %s", name, hosts[0], list, rendezvousHint)
		}
		e.Addr = net.JoinHostPort(hosts[0], strconv.Itoa(port))
		e.Listen = ":" + strconv.Itoa(port)
		return nil
	default:
		e.LocalSize = atoi("MPI_LOCALNRANKS")
	}
	if rendezvous == "" {
		return fmt.Errorf("coll: %s environment found (%s) but no rendezvous address: %s", e.Launcher, place, rendezvousHint)
	}
	e.Addr = rendezvous
	return nil
}

func orUnknown(n int) string {
	if n == 0 {
		return "several"
	}
	return strconv.Itoa(n)
}

func fnv32(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}

// rendezvousFile names the one-host rendezvous of e's job: in
// IBEX_RENDEZVOUS_DIR, else the temporary directory; by user, launcher,
// job id and size.
func rendezvousFile(getenv func(string) string, e *Env) string {
	dir := getenv("IBEX_RENDEZVOUS_DIR")
	if dir == "" {
		dir = os.TempDir()
	}
	clean := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, e.JobID)
	return filepath.Join(dir, fmt.Sprintf("ibex-coll-%d-%s-%s-%d.addr", os.Getuid(), e.Launcher, clean, e.Size))
}

// ExpandNodeList expands Slurm's compressed host list: "node[01-03,07],gpu1"
// is node01 node02 node03 node07 gpu1 (zero padding kept; several bracket
// groups in one name multiply).
func ExpandNodeList(s string) ([]string, error) {
	const maxHosts = 1 << 16
	var out []string
	for _, name := range splitTop(s) {
		if name == "" {
			continue
		}
		hosts, err := expandName(name, maxHosts-len(out))
		if err != nil {
			return nil, err
		}
		out = append(out, hosts...)
	}
	if len(out) == 0 {
		return nil, errors.New("no hosts")
	}
	return out, nil
}

// splitTop splits at the commas outside brackets.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

func expandName(name string, limit int) ([]string, error) {
	open := strings.IndexByte(name, '[')
	if open < 0 {
		if strings.ContainsRune(name, ']') {
			return nil, fmt.Errorf("%q: ']' without '['", name)
		}
		return []string{name}, nil
	}
	end := strings.IndexByte(name[open:], ']')
	if end < 0 {
		return nil, fmt.Errorf("%q: '[' without ']'", name)
	}
	prefix, body, rest := name[:open], name[open+1:open+end], name[open+end+1:]
	tails, err := expandName(rest, limit)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, part := range strings.Split(body, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || lo == "" || a < 0 || b < a {
			return nil, fmt.Errorf("%q: range %q: want N or N-M with N <= M", name, part)
		}
		if (b-a+1)*len(tails) > limit-len(out) {
			return nil, fmt.Errorf("%q: more than %d hosts", name, limit)
		}
		for n := a; n <= b; n++ {
			num := strconv.Itoa(n)
			if len(num) < len(lo) {
				num = strings.Repeat("0", len(lo)-len(num)) + num
			}
			for _, t := range tails {
				out = append(out, prefix+num+t)
			}
		}
	}
	return out, nil
}

// NewCommEnv makes the communicator of a launcher's job, e from FromEnv:
// on one host without an address, through e.File (rank 0 listens on
// 127.0.0.1 and publishes its address there; the others wait for it,
// until ctx ends); else at e.Addr (rank 0 listening on e.Listen if set).
func NewCommEnv(ctx context.Context, e Env, opt Options) (*Comm, error) {
	switch {
	case e.Size > 1 && e.File != "" && e.Rank == 0:
		var lc net.ListenConfig
		l, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("coll: rank 0: listen for the rendezvous: %w", err)
		}
		id, err := NewUniqueID(l.Addr().String())
		if err != nil {
			_ = l.Close()
			return nil, err
		}
		content := id.String() + " " + e.JobID + "\n"
		if err := publishFile(e.File, content); err != nil {
			_ = l.Close()
			return nil, fmt.Errorf("coll: rank 0: publish the rendezvous address: %w (set IBEX_RENDEZVOUS_DIR to a directory every rank sees, or IBEX_RENDEZVOUS=host:port)", err)
		}
		// Once every rank is in (or the rendezvous failed) the file has
		// served; an earlier job's stale file is replaced above.
		defer removeIfOurs(e.File, content)
		return newComm(ctx, id, 0, e.Size, opt, l)
	case e.Size > 1 && e.File != "":
		id, err := waitFile(ctx, e)
		if err != nil {
			return nil, err
		}
		return NewComm(ctx, id, e.Rank, e.Size, opt)
	case e.Size > 1 && e.Listen != "" && e.Rank == 0:
		var lc net.ListenConfig
		l, err := lc.Listen(ctx, "tcp", e.Listen)
		if err != nil {
			return nil, fmt.Errorf("coll: rank 0: listen on %s for the rendezvous at %s: %w (or %s)", e.Listen, e.Addr, err, rendezvousHint)
		}
		return newComm(ctx, EnvUniqueID(e), 0, e.Size, opt, l)
	}
	return NewComm(ctx, EnvUniqueID(e), e.Rank, e.Size, opt)
}

// publishFile writes content to path at once: a temporary file beside it,
// renamed over it.
func publishFile(path, content string) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	_, err = io.WriteString(f, content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

func removeIfOurs(path, content string) {
	if b, err := os.ReadFile(path); err == nil && string(b) == content {
		_ = os.Remove(path)
	}
}

// filePoll is how often a rank looks for rank 0's rendezvous file.
const filePoll = 20 * time.Millisecond

// waitFile waits for rank 0's rendezvous file of e's job and for the
// listener it names to answer: a file left by an earlier job of the same
// id names a listener that is gone (or the wrong job id), and is read
// again until rank 0 replaces it.
func waitFile(ctx context.Context, e Env) (UniqueID, error) {
	last := "the file does not exist"
	for {
		b, err := os.ReadFile(e.File)
		switch {
		case err == nil:
			idStr, job, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
			id, perr := ParseUniqueID(idStr)
			switch {
			case perr != nil:
				last = fmt.Sprintf("it holds %q", b)
			case job != e.JobID:
				last = fmt.Sprintf("it names job %q", job)
			default:
				d := net.Dialer{Timeout: time.Second}
				c, derr := d.DialContext(ctx, "tcp", id.Addr)
				if derr == nil {
					_ = c.Close()
					return id, nil
				}
				last = fmt.Sprintf("it names %s, which does not answer (a stale file?)", id.Addr)
			}
		case !errors.Is(err, os.ErrNotExist):
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return UniqueID{}, fmt.Errorf("coll: rank %d of %d: %w waiting for rank 0's rendezvous file %s (%s): is rank 0 running, and do all ranks see that directory? Set IBEX_RENDEZVOUS_DIR to one they all see, or IBEX_RENDEZVOUS=host:port",
				e.Rank, e.Size, ctx.Err(), e.File, last)
		case <-time.After(filePoll):
		}
	}
}

// WriteBenchRowUnchecked is WriteBenchRow for a run without the check
// (-c 0): the #wrong columns say N/A, as nccl-tests prints them.
func WriteBenchRowUnchecked(w io.Writer, r BenchRow) {
	fmt.Fprintf(w, "%12d  %12d  %8s  %6s  %6d  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n",
		r.Size, r.Count, r.Type, r.Redop, r.Root,
		fitFloat(r.OOPTime, 7), fitFloat(r.OOPAlgBW, 6), fitFloat(r.OOPBusBW, 6), "N/A",
		fitFloat(r.IPTime, 7), fitFloat(r.IPAlgBW, 6), fitFloat(r.IPBusBW, 6), "N/A")
}
