package daemon

import "testing"

// TestConfigPSP: a device's psp policy is checked, and "on" or "required"
// needs psp_key; the errors name the field.
func TestConfigPSP(t *testing.T) {
	t.Setenv("IBEX_UDP_ADDR", "")
	_, err := ParseConfig([]byte("devices:\n  - {name: udp0, address: 10.0.0.1, psp: maybe}\n  - {name: udp1, address: 10.0.0.2, psp: required}\n"))
	checkConfigErr(t, err, "devices[0].psp: ", `"maybe" is not off, on or required`, "devices[1].psp_key: ", "missing")
	c, err := ParseConfig([]byte("devices:\n  - {name: udp0, address: 10.0.0.1, psp: required, psp_key: /etc/ibex/psp.key}\n"))
	if err != nil || c.Devices[0].PSP != "required" || c.Devices[0].PSPKey != "/etc/ibex/psp.key" {
		t.Fatalf("%+v, %v", c.Devices, err)
	}
}
