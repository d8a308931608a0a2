package driver_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/verbs/driver"
)

// A provider whose QPDriver shape is chosen per device: the contract test
// for "Destroy plus exactly one of Executor and Issuer".
type shapeProvider struct{}

func (shapeProvider) Name() string { return "drivertest" }
func (shapeProvider) Devices() []string {
	return []string{"exec0", "issue0", "both0", "neither0"}
}
func (shapeProvider) Open(device string, c driver.Context) (driver.Device, error) {
	return &shapeDevice{name: device, ctx: c}, nil
}

type shapeDevice struct {
	name string
	ctx  driver.Context
	qps  []driver.QP
}

func (d *shapeDevice) DeviceAttr() verbs.DeviceAttr {
	return verbs.DeviceAttr{PhysPortCnt: 1, MaxQP: 4, MaxQPWR: 256, MaxSGE: 1, MaxCQ: 4, MaxCQE: 16, MaxMR: 4, MaxPD: 4, MaxMRSize: 1 << 20, MaxMsgSize: 1 << 20}
}
func (d *shapeDevice) PortAttr(uint8) (verbs.PortAttr, error) {
	return verbs.PortAttr{State: verbs.PortActive, MaxMTU: verbs.MTU1024, ActiveMTU: verbs.MTU1024}, nil
}
func (d *shapeDevice) Close() error { return nil }
func (d *shapeDevice) NewQP(qp driver.QP) (driver.QPDriver, error) {
	d.qps = append(d.qps, qp)
	switch d.name {
	case "exec0":
		return execQP{}, nil
	case "issue0":
		return issueQP{}, nil
	case "both0":
		return bothQP{}, nil
	}
	return neitherQP{}, nil
}

type neitherQP struct{}

func (neitherQP) Destroy() {}

type execQP struct{ neitherQP }

func (execQP) Execute(*driver.SendWQE) driver.Outcome { return driver.Outcome{} }

type issueQP struct{ neitherQP }

func (issueQP) Issue(*driver.SendWQE) {}

type bothQP struct{ neitherQP }

func (bothQP) Execute(*driver.SendWQE) driver.Outcome { return driver.Outcome{} }
func (bothQP) Issue(*driver.SendWQE)                  {}

func init() { driver.Register(shapeProvider{}) }

func createQP(t *testing.T, device string) (*verbs.QP, error) {
	t.Helper()
	c, err := verbs.Open("drivertest/" + device)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	pd, err := c.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pd.Dealloc() })
	cq, err := c.CreateCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cq.Destroy() })
	qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq})
	if qp != nil {
		t.Cleanup(func() { _ = qp.Destroy() })
	}
	return qp, err
}

func TestQPDriverShape(t *testing.T) {
	for _, dev := range []string{"exec0", "issue0"} {
		if _, err := createQP(t, dev); err != nil {
			t.Errorf("%s: CreateQP: %v", dev, err)
		}
	}
	for _, dev := range []string{"both0", "neither0"} {
		qp, err := createQP(t, dev)
		if err == nil || qp != nil {
			t.Errorf("%s: CreateQP = %v, %v; want an error naming the contract", dev, qp, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "drivertest") || !strings.Contains(msg, "exactly one of Execute and Issue") {
			t.Errorf("%s: error %q does not name the provider and the contract", dev, msg)
		}
	}
}

// The handle a provider gets is the application's QP, with the hooks.
func TestHandleIsTheQP(t *testing.T) {
	qp, err := createQP(t, "exec0")
	if err != nil {
		t.Fatal(err)
	}
	h := driver.QP{QP: qp}
	if !h.Valid() || h.Num() != qp.Num() || h.PD().PD != qp.PD() || h.Context().Context != qp.Context() {
		t.Fatalf("handle %+v does not wrap qp %#x", h, qp.Num())
	}
	if h.Destroyed() {
		t.Fatal("Destroyed before Destroy")
	}
	init := verbs.QPAttr{State: verbs.QPSInit, Port: 1}
	if err := qp.Modify(&init, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	h.Fail(errors.New("test: provider found the peer dead"), verbs.EventQPFatal, false)
	if qp.State() != verbs.QPSErr {
		t.Fatalf("after Fail the QP is %v, want ERR", qp.State())
	}
	if err := qp.Err(); err == nil || !strings.Contains(err.Error(), "peer dead") {
		t.Fatalf("Err() = %v, want the provider's cause", err)
	}
	if err := qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	if !h.Destroyed() {
		t.Fatal("Destroyed false after Destroy")
	}
	if (driver.QP{}).Valid() {
		t.Fatal("zero QP handle is valid")
	}
}
