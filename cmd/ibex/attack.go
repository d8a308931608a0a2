package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ibex-rdma/ibex/attack"
)

// attackVictimEnv makes `ibex attack` a victim process (attack.VictimMain)
// with the arguments it holds, separated by newlines: the suite starts its
// victims as this same command, as ibex coll starts its ranks.
const attackVictimEnv = "IBEX_ATTACK_VICTIM"

type attackOptions struct {
	JSON    bool
	Encrypt bool
	Cases   []string
	Seed    uint64
	Iface   string
	Verbose bool
	Ctl     bool
}

func newAttackCmd() *cobra.Command {
	var opt attackOptions
	cmd := &cobra.Command{
		Use:   "attack [--encrypt] [--json] [--case NAME]... [--seed N]",
		Short: "Run the attack suite (ReDMArk's attacks) against victim processes on loopback",
		Long: "Run the attack suite: victim processes with RC traffic between udp devices on\n" +
			"127.0.0.110-119, and this process as an attacker on the same network, which\n" +
			"sniffs their packets (AF_PACKET on lo) and forges RoCEv2 packets with correct\n" +
			"ICRCs from its own address, from another port of the peer's host and with the\n" +
			"peer's address spoofed (raw socket); it replays captured packets, guesses rkeys,\n" +
			"and exhausts an ibexd it starts with two tenants.\n" +
			"Each case maps to a ReDMArk weakness/attack, states what success means and the\n" +
			"result expected; the table shows the measured result beside it. Needs root\n" +
			"(CAP_NET_RAW). --encrypt runs the victims with IBEX_PSP=required.\n\n" +
			"Exit status: 0 every case as expected, 1 some case differs, 2 the suite could\n" +
			"not run.\n\n" +
			"--controls runs each attack against a target without the defence that blocks\n" +
			"it instead; each must succeed, or the suite's \"blocked\" means nothing.\n\n" +
			wrap("Cases: "+strings.Join(attack.Cases(), ", "), 80) + "\n" +
			wrap("Controls: "+strings.Join(attack.Controls(), ", "), 80) + "\n\n" +
			"Examples:\n" +
			"  sudo ibex attack\n" +
			"  sudo ibex attack --encrypt --json\n" +
			"  sudo ibex attack --case inject- --case replay\n" +
			"  sudo ibex attack --controls",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if args, ok := os.LookupEnv(attackVictimEnv); ok {
				return attack.VictimMain(strings.Split(args, "\n"), os.Stdin, cmd.OutOrStdout())
			}
			return runAttack(cmd, opt)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&opt.JSON, "json", false, "print the report as JSON")
	f.BoolVar(&opt.Encrypt, "encrypt", false, "run the victims with encryption required (IBEX_PSP=required)")
	f.StringSliceVar(&opt.Cases, "case", nil, "run only this case (repeatable; a prefix ending in - selects a family)")
	f.Uint64Var(&opt.Seed, "seed", 0, "seed of the random guesses (0: random; the report prints it)")
	f.StringVar(&opt.Iface, "interface", "lo", "interface the attacker sniffs")
	f.BoolVar(&opt.Ctl, "controls", false, "run the controls instead: each attack against a target without its defence, which must succeed (the detectors are not blind)")
	f.BoolVarP(&opt.Verbose, "verbose", "v", false, "log each case as it runs, on stderr")
	return cmd
}

func runAttack(cmd *cobra.Command, opt attackOptions) error {
	exe, err := os.Executable()
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	cfg := attack.Config{Encrypt: opt.Encrypt, Controls: opt.Ctl, Cases: opt.Cases, Seed: opt.Seed, Interface: opt.Iface,
		Victim: func(args []string) *exec.Cmd {
			c := exec.Command(exe, os.Args[1:]...)
			c.Env = append(os.Environ(), attackVictimEnv+"="+strings.Join(args, "\n"))
			return c
		}}
	if opt.Verbose {
		cfg.Log = cmd.ErrOrStderr()
	}
	rep, err := attack.Run(cfg)
	if err != nil {
		if errors.Is(err, attack.ErrNoCapability) {
			err = fmt.Errorf("%w (run as root)", err)
		}
		return &exitError{code: 2, err: err}
	}
	if opt.JSON {
		err = rep.WriteJSON(cmd.OutOrStdout())
	} else {
		err = rep.WriteText(cmd.OutOrStdout())
	}
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if n := rep.Mismatches(); n > 0 {
		return &exitError{code: 1, err: fmt.Errorf("attack: %d of %d cases differ from their expectation", n, len(rep.Results))}
	}
	return nil
}

// wrap breaks s into lines of at most width runes at spaces.
func wrap(s string, width int) string {
	var b strings.Builder
	n := 0
	for i, w := range strings.Fields(s) {
		if i > 0 && n+1+len(w) > width {
			b.WriteString("\n")
			n = 0
		} else if i > 0 {
			b.WriteString(" ")
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}
