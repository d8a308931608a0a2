package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestConfigPartitions: the partitions file gives each device the P_Key
// table of its address; a bad file, or one that leaves a device in no
// partition, is a config error naming the field, the file's line and the
// problem.
func TestConfigPartitions(t *testing.T) {
	t.Setenv("IBEX_UDP_ADDR", "")
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.conf", "Default=0x7fff : ALL=full;\nstorage=0x8001 : 127.0.0.81=full, ALL=limited;\n")
	yml := "devices:\n  - {name: udp0, address: 127.0.0.81}\n  - {name: udp1, address: 127.0.0.82}\npartitions: " + good + "\n"
	c, err := ParseConfig([]byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range [][]uint16{{0xffff, 0x8001}, {0xffff, 0x0001}} {
		if got, err := c.PKeys(c.Devices[i]); err != nil || !slices.Equal(got, want) {
			t.Errorf("devices[%d]: table %#04x, %v; want %#04x", i, got, err, want)
		}
	}
	for _, tc := range []struct{ file, want string }{
		{write("bad.conf", "Default=0x7fff : ALL=full;\n\nstorage : ALL;\n"), "bad.conf:3: partition \"storage\": no P_Key"},
		{write("none.conf", "storage=0x8001 : 127.0.0.81=full;\n"), "port 127.0.0.82 (GUID 0x0000ffff7f000052) is a member of no partition"},
		{filepath.Join(dir, "absent.conf"), "no such file"},
	} {
		yml := "devices:\n  - {name: udp0, address: 127.0.0.81}\n  - {name: udp1, address: 127.0.0.82}\npartitions: " + tc.file + "\n"
		_, err := ParseConfig([]byte(yml))
		if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "partitions: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want a config error on partitions containing %q", filepath.Base(tc.file), err, tc.want)
		}
	}
}
