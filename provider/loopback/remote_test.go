package loopback_test

import (
	"io"
	"net"
	"testing"

	"github.com/ibex-rdma/ibex/provider/loopback"
	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/verbs/verbstest"
)

// TestConformanceRemote runs the whole suite in remote mode with the server
// in this process but reached only through a byte stream (net.Pipe): every
// call on end b and every access to its memory goes over the suite's RPC.
// Loopback connects QPs of any context of the process by QPN, so this
// checks the harness itself; a provider's cross-process test puts the
// server in a child (verbstest.StartChild).
func TestConformanceRemote(t *testing.T) {
	verbstest.Run(t, verbstest.Config{
		Remote: func(t testing.TB) (*verbs.Context, io.ReadWriteCloser) {
			a := open(t)
			conn, srv := net.Pipe()
			served := make(chan error, 1)
			go func() {
				served <- verbstest.Serve(srv, func() (*verbs.Context, error) { return verbs.Open(loopback.DeviceName) }, loopback.SetPortState)
			}()
			// Runs after the suite closed the connection.
			t.Cleanup(func() {
				if err := <-served; err != nil {
					t.Errorf("serve: %v", err)
				}
			})
			return a, conn
		},
		SetPortState: loopback.SetPortState,
	})
}
