// Package proctest tests package coll across operating-system processes:
// the test binary starts itself again as each rank of a communicator, so
// ranks share nothing but what coll puts between them (shm0 between
// processes of one host, udp0 between network namespaces), and a rank can
// be killed with SIGKILL mid-collective. The package holds only tests.
//
// The ranks inherit the environment, so IBEX_ALGO=tree (ring, rhd, rd,
// direct) runs every call that supports it with that algorithm; -seed
// replays a logged run's input values.
package proctest
