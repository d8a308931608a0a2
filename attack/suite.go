package attack

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"
)

// Outcome is what an attack achieved, or why it was not tried.
type Outcome string

const (
	Blocked   Outcome = "blocked"   // tried; it did not work
	Succeeded Outcome = "SUCCEEDED" // tried; it worked
	NA        Outcome = "n/a"       // not tried: what it needs is missing (the detail says what)
)

// Mode is the configuration the victims run in.
type Mode string

const (
	Plain     Mode = "plain"     // RoCEv2 as rxe speaks it
	Encrypted Mode = "encrypted" // IBEX_PSP=required
	Control   Mode = "controls"  // the controls, in plaintext
)

// Addresses the suite's processes use, all on loopback. The victims' are
// the attacker's to sniff; the attacker's own is not a peer of any QP.
var (
	AddrA        = netip.MustParseAddr("127.0.0.110") // pair victim: requester
	AddrB        = netip.MustParseAddr("127.0.0.111") // pair victim: responder
	AddrAttacker = netip.MustParseAddr("127.0.0.112") // the attacker's own address
	AddrServer   = netip.MustParseAddr("127.0.0.113") // server victim
	AddrWriter   = netip.MustParseAddr("127.0.0.114") // server victim's legitimate writer
	AddrDaemon   = netip.MustParseAddr("127.0.0.115") // ibexd's device
)

// InRange tells the suite's addresses, 127.0.0.110-119: the sniffer keeps
// packets between them only.
func InRange(a netip.Addr) bool {
	if !a.Is4() {
		return false
	}
	b := a.As4()
	return b[0] == 127 && b[1] == 0 && b[2] == 0 && b[3] >= 110 && b[3] <= 119
}

// Config is one run of the suite. The zero value of every field but Victim
// is its documented default.
type Config struct {
	// Victim returns the command that runs a victim process with args
	// (see VictimMain): `ibex attack victim ARGS`, or a test binary
	// re-executed. Required.
	Victim func(args []string) *exec.Cmd
	// Encrypt runs the victims with encryption required (IBEX_PSP=required
	// and a master key of the suite's making).
	Encrypt bool
	// Interface is where the attacker sniffs; default "lo".
	Interface string
	// Cases selects cases by name (a name, or a prefix ending in "-");
	// default all.
	Cases []string
	// Seed drives the random guesses; 0 picks one (Report.Seed says which).
	Seed uint64
	// Controls runs the controls instead of the cases: each attack
	// against a target without the defence that blocks it, which must
	// succeed. They ignore Encrypt.
	Controls bool
	// Log, if set, gets a line as each case starts and ends.
	Log io.Writer
}

// Result is one case's measured outcome beside its expectation.
type Result struct {
	Case     string  `json:"case"`
	Ref      string  `json:"redmark"`
	Success  string  `json:"success_means"`
	Expected Outcome `json:"expected"`
	Got      Outcome `json:"result"`
	Detail   string  `json:"detail,omitempty"`
	Seconds  float64 `json:"seconds"`
}

// Mismatch tells that the result differs from the expectation.
func (r Result) Mismatch() bool { return r.Got != r.Expected }

// Report is a run's results.
type Report struct {
	Mode    Mode     `json:"mode"`
	Seed    uint64   `json:"seed"`
	Results []Result `json:"results"`
}

// Mismatches counts the results that differ from their expectations.
func (r *Report) Mismatches() int {
	n := 0
	for _, x := range r.Results {
		if x.Mismatch() {
			n++
		}
	}
	return n
}

// WriteText prints the table: case | ReDMArk | expected | result | detail.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "CASE\tREDMARK\tEXPECTED\tRESULT\tDETAIL\n")
	for _, x := range r.Results {
		mark := ""
		if x.Mismatch() {
			mark = "  (!)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s%s\t%s\n", x.Case, x.Ref, x.Expected, x.Got, mark, x.Detail)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "mode %s, seed %d: %d cases, %d succeeded, %d differ from the expectation\n",
		r.Mode, r.Seed, len(r.Results), r.count(Succeeded), r.Mismatches())
	return err
}

func (r *Report) count(o Outcome) int {
	n := 0
	for _, x := range r.Results {
		if x.Got == o {
			n++
		}
	}
	return n
}

// WriteJSON prints the report as one JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ErrNoCapability: the machine lacks what the suite needs (CAP_NET_RAW for
// the sniffer and the raw socket).
var ErrNoCapability = errors.New("missing capability")

// Suite is a run in progress: the attacker's tools and the victims' setting.
type Suite struct {
	cfg   Config
	mode  Mode
	rng   *rand.Rand
	env   []string // for every victim
	dir   string
	sn    *Sniffer
	raw   *RawForger
	udp   *UDPForger
	plain string // encrypted mode: why encryption is not in effect ("" it is)

	sameHost  map[netip.Addr]*UDPForger // fromSameHost's sockets
	key       string                    // encrypted mode: the master key file
	exhausted map[uint32]*exhaustRun    // the exhaustion cases' shared runs, by the probe's tenant
}

// Run runs the selected cases in order, each against victims of its own.
func Run(cfg Config) (*Report, error) {
	if cfg.Victim == nil {
		return nil, errors.New("attack: Config.Victim: required")
	}
	if cfg.Interface == "" {
		cfg.Interface = "lo"
	}
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64()
	}
	if cfg.Controls {
		cfg.Encrypt = false
	}
	cases, err := selectCases(cfg.Cases, cfg.Controls)
	if err != nil {
		return nil, err
	}
	// One suite at a time on this host: they share the addresses.
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "ibex-attack.lock"), os.O_CREATE|os.O_RDONLY, 0o644)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return nil, fmt.Errorf("attack: lock %s: %w", lock.Name(), err)
	}
	s := &Suite{cfg: cfg, mode: Plain, rng: rand.New(rand.NewPCG(cfg.Seed, 21))}
	if cfg.Encrypt {
		s.mode = Encrypted
	}
	if cfg.Controls {
		s.mode = Control
	}
	if s.dir, err = os.MkdirTemp("", "ibex-attack-"); err != nil {
		return nil, err
	}
	defer os.RemoveAll(s.dir)
	// Victims attach to no daemon unless a case starts one.
	s.env = []string{"IBEX_DAEMON=off", "IBEX_PSP=off"}
	if cfg.Encrypt {
		key := filepath.Join(s.dir, "psp.key")
		var k [32]byte
		for i := range k {
			k[i] = byte(s.rng.Uint32())
		}
		if err := os.WriteFile(key, []byte(fmt.Sprintf("0:%x\n", k)), 0o600); err != nil {
			return nil, err
		}
		s.env = []string{"IBEX_DAEMON=off", "IBEX_PSP=required", "IBEX_PSP_KEY=" + key}
		s.key = key
	}
	if s.sn, err = Sniff(cfg.Interface, InRange); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoCapability, err)
	}
	defer s.sn.Close()
	if s.raw, err = NewRawForger(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoCapability, err)
	}
	defer s.raw.Close()
	if s.udp, err = NewUDPForger(netip.AddrPortFrom(AddrAttacker, 0), false); err != nil {
		return nil, err
	}
	defer s.udp.Close()
	defer func() {
		for _, f := range s.sameHost {
			_ = f.Close()
		}
	}()

	rep := &Report{Mode: s.mode, Seed: cfg.Seed}
	if cfg.Encrypt {
		s.plain = s.probeEncryption()
	}
	for _, c := range cases {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, "attack: %s ...\n", c.Name)
		}
		s.sn.Forget()
		start := time.Now()
		res := Result{Case: c.Name, Ref: c.Ref, Success: c.Success, Expected: c.expect(s.mode)}
		switch {
		case s.plain != "":
			res.Got, res.Detail = NA, s.plain
		default:
			res.Got, res.Detail = c.run(s)
		}
		res.Seconds = time.Since(start).Seconds()
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, "attack: %s: %s (%s) in %.2fs\n", c.Name, res.Got, res.Detail, res.Seconds)
		}
		rep.Results = append(rep.Results, res)
	}
	return rep, nil
}

// probeEncryption runs a pair victim with the encrypted mode's environment
// and looks at its packets: "" when they are secured (BTH TVer 1), else why
// the encrypted mode cannot be measured.
func (s *Suite) probeEncryption() string {
	mark := s.sn.Mark()
	v, err := s.startVictim(nil, "--mode", "pair")
	if err != nil {
		return "victim with IBEX_PSP=required did not start: " + firstLine(err.Error())
	}
	defer v.stop()
	seen, _, ok := s.sn.Wait(mark, 3*time.Second, func(x *Seen) bool { return x.Src.Addr() == AddrA && x.Dst.Addr() == AddrB })
	if !ok {
		return "no traffic seen from a victim with IBEX_PSP=required"
	}
	if !secured(&seen) {
		return "IBEX_PSP=required left the victims' packets in the clear: encryption not in effect"
	}
	return ""
}

// secured tells a packet whose BTH says TVer 1 (a PSP-secured packet).
func secured(x *Seen) bool {
	ihl := int(x.IP[0]&0xf) * 4
	return x.IP[ihl+8+1]&0xf == 1
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
