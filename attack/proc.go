package attack

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// proc is a running victim process.
type proc struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	stderr bytes.Buffer
	lines  chan string
	mark   int // the sniffer's index when it started
}

// startVictim starts a victim with args and env entries added, and waits
// for its first status, which says it is set up.
func (s *Suite) startVictim(env []string, args ...string) (*proc, error) {
	return s.startAs(0, env, args...)
}

// startAs is startVictim with the primary group gid (0: this process's):
// the daemon cases' tenants are told apart by it.
func (s *Suite) startAs(gid uint32, env []string, args ...string) (*proc, error) {
	cmd := s.cfg.Victim(args)
	cmd.Env = append(append(cmd.Environ(), s.env...), env...)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL // no victim outlives the suite
	if gid != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(os.Getuid()), Gid: gid, NoSetGroups: true}
	}
	p := &proc{cmd: cmd, lines: make(chan string, 16), mark: s.sn.Mark()}
	cmd.Stderr = &p.stderr
	var err error
	if p.in, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("victim: %w", err)
	}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	if _, err := p.ask(command{Cmd: "status"}); err != nil {
		p.kill()
		return nil, err
	}
	return p, nil
}

// ask sends c and reads the answer.
func (p *proc) ask(c command) (Status, error) {
	b, _ := json.Marshal(c)
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		return Status{}, p.failed(err)
	}
	select {
	case line, ok := <-p.lines:
		if !ok {
			return Status{}, p.failed(errVictimGone)
		}
		var st Status
		if err := json.Unmarshal([]byte(line), &st); err != nil {
			return Status{}, fmt.Errorf("victim said %q: %w", line, err)
		}
		if st.Err != "" {
			return st, fmt.Errorf("victim: %s: %s", c.Cmd, st.Err)
		}
		return st, nil
	case <-time.After(20 * time.Second):
		return Status{}, p.failed(fmt.Errorf("victim did not answer %q", c.Cmd))
	}
}

func (p *proc) failed(err error) error {
	p.kill()
	msg := strings.TrimSpace(p.stderr.String())
	if len(msg) > 2000 {
		msg = msg[len(msg)-2000:]
	}
	if msg != "" {
		return fmt.Errorf("%w: %s", err, msg)
	}
	return err
}

// stop ends the victim and returns its last status.
func (p *proc) stop() (Status, error) {
	st, err := p.ask(command{Cmd: "quit"})
	_ = p.in.Close()
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
	return st, err
}

func (p *proc) kill() {
	if p.cmd.ProcessState == nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
		_ = p.in.Close()
		_ = p.cmd.Wait()
	}
}
