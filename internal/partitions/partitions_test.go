package partitions

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

const example = `# opensm's example, trimmed
Default=0x7fff, ipoib : ALL=full;

storage=0x8001, mtu=4 :
	0x0000ffff7f000051=full,   # 127.0.0.81 by GUID
	ALL=limited;
compute=0x0002, defmember=full : 127.0.0.82, ::ffff:127.0.0.83=limited ;
both=0x0003 : 127.0.0.84=both;
lim=0x0004 : ALL_SWITCHES=full, ALL_CAS ;
first=0x0005, indx0 : 127.0.0.85;
`

func TestTables(t *testing.T) {
	c, err := Parse("partitions.conf", example)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr string
		want []uint16
	}{
		{"127.0.0.81", []uint16{0xffff, 0x8001, 0x0004}},
		{"127.0.0.82", []uint16{0xffff, 0x0001, 0x8002, 0x0004}},
		{"127.0.0.83", []uint16{0xffff, 0x0001, 0x0002, 0x0004}},
		{"127.0.0.84", []uint16{0xffff, 0x0001, 0x8003, 0x0003, 0x0004}},
		{"127.0.0.85", []uint16{0x0005, 0xffff, 0x0001, 0x0004}},
	} {
		got, err := c.Table(Port{Addr: netip.MustParseAddr(tc.addr)})
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: table %#04x, %v; want %#04x", tc.addr, got, err, tc.want)
		}
	}
	if g := (Port{Addr: netip.MustParseAddr("10.0.0.1")}).GUID(); g != 0x0000ffff0a000001 {
		t.Errorf("GUID of 10.0.0.1: %#x", g)
	}
}

func TestNoPartition(t *testing.T) {
	c, err := Parse("p.conf", "a=0x10 : 127.0.0.86=full;\n")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Table(Port{Addr: netip.MustParseAddr("127.0.0.87")}); err == nil || !strings.Contains(err.Error(), "no partition") {
		t.Errorf("a port in no partition: %v", err)
	}
}

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		a, b uint16
		ok   bool
	}{
		{0xffff, 0xffff, true}, {0xffff, 0x7fff, true}, {0x7fff, 0x7fff, false},
		{0x8001, 0x0001, true}, {0x8001, 0x8002, false}, {0x8000, 0x8000, false},
	} {
		if Match(tc.a, tc.b) != tc.ok || Match(tc.b, tc.a) != tc.ok {
			t.Errorf("Match(%#04x, %#04x) = %v, want %v", tc.a, tc.b, !tc.ok, tc.ok)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"Default=0x7fff : ALL=full", "f:1: statement \"Default=0x7fff : ALL=full\" has no terminating ';'"},
		{"\n\nDefault=0x7fff ALL=full;", "f:3: statement \"Default=0x7fff ALL=full\": no ':'"},
		{"# c\nstorage : ALL;", "f:2: partition \"storage\": no P_Key"},
		{"s=0x1zz : ALL;", "f:1: partition \"s\": P_Key \"0x1zz\" is not a 16-bit number"},
		{"s=0x10000 : ALL;", "P_Key \"0x10000\" is not a 16-bit number"},
		{"s=0x8000 : ALL;", "0x0000 and 0x8000 are the invalid P_Key"},
		{"s=0x1, bogus : ALL;", "f:1: partition \"s\": unknown flag \"bogus\""},
		{"s=0x1, defmember=half : ALL;", "defmember: membership \"half\" is not full, limited or both"},
		{"a=0x1 : ALL;\n\n b=0x2 :\n 0xqq;", "f:3: partition \"b\": member \"0xqq\" is not a port GUID"},
		{"a=0x1 : ALL=fully;", "member \"ALL\": membership \"fully\" is not full, limited or both"},
		{"a=0x1 : ALL,,SELF;", "an empty member"},
		{"a=0x1 : ALL;\na=0x2 : ALL;", "f:2: partition \"a\" defined again (first on line 1)"},
		{"a=0x1 : ALL;\nb=0x8001 : ALL;", "f:2: partition \"b\": P_Key 0x0001 is partition \"a\"'s too (line 1)"},
		{"=0x1 : ALL;", "no partition name"},
	} {
		_, err := Parse("f", tc.text)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.text, err, tc.want)
		}
	}
}

// FuzzParse: no input panics Parse or Table, and a parsed file's tables
// hold valid P_Keys only.
func FuzzParse(f *testing.F) {
	f.Add(example)
	f.Add("a=0x1 : ALL;\nb : ;")
	f.Add(";;;\n#\n:=,")
	f.Fuzz(func(t *testing.T, text string) {
		c, err := Parse("f", text)
		if err != nil {
			return
		}
		tb, err := c.Table(Port{Addr: netip.MustParseAddr("127.0.0.81")})
		if err != nil {
			return
		}
		for _, k := range tb {
			if k&0x7fff == 0 {
				t.Fatalf("%q: table %#04x holds the invalid P_Key", text, tb)
			}
		}
	})
}
