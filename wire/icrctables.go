package wire

import "hash/crc32"

// Tables of CRC contributions, for folding header fields into CRC states
// (see icrc.go). 25 KiB, built at init in a few microseconds.

// byteTable holds the contribution to the CRC state of each value of a
// byte followed by a fixed number of bytes: the state after hashing the
// real bytes, XORed with byteTable[d], is the state had the byte been XORed
// with d. The CRC's linearity makes this exact.
type byteTable [256]uint32

// newByteTable returns the contributions of a byte followed by dist bytes.
func newByteTable(dist int) (t byteTable) {
	for v := range t {
		r := crc32.IEEETable[v] // the raw register after the byte, from 0
		for range dist {
			r = crc32.IEEETable[byte(r)] ^ r>>8
		}
		t[v] = r
	}
	return t
}

// fieldTable is byteTable for a 16-bit big-endian field.
type fieldTable [2]byteTable

func (t *fieldTable) at(v uint16) uint32 { return t[0][v>>8] ^ t[1][v&0xff] }

// newFieldTable returns the contributions of a 16-bit field at offset off
// in a block of n bytes.
func newFieldTable(n, off int) fieldTable {
	return fieldTable{newByteTable(n - off - 1), newByteTable(n - off - 2)}
}

// prefixTables fold lengths and IDs into ICRCPrefix states: blocks are the
// IP and UDP headers.
var prefixTables struct {
	v4 struct{ totLen, id, udpLen fieldTable }
	v6 struct{ plen, udpLen fieldTable }
}

// frameTables mask the variant fields for icrcIP: blocks are the IP and UDP
// headers and the first 5 bytes of the BTH.
var frameTables struct {
	v4 struct {
		tos, ttl      byteTable
		ipSum, udpSum fieldTable
	}
	v6 struct {
		vtf      [4]byteTable // version, traffic class, flow label
		hopLimit byteTable
		udpSum   fieldTable
	}
}

func init() {
	const n4, n6 = ipv4HeaderLen + udpHeaderLen, ipv6HeaderLen + udpHeaderLen
	prefixTables.v4.totLen = newFieldTable(n4, 2)
	prefixTables.v4.id = newFieldTable(n4, 4)
	prefixTables.v4.udpLen = newFieldTable(n4, ipv4HeaderLen+4)
	prefixTables.v6.plen = newFieldTable(n6, 4)
	prefixTables.v6.udpLen = newFieldTable(n6, ipv6HeaderLen+4)

	const f4, f6 = n4 + 5, n6 + 5
	v4 := &frameTables.v4
	v4.tos = newByteTable(f4 - 1 - 1)
	v4.ttl = newByteTable(f4 - 8 - 1)
	v4.ipSum = newFieldTable(f4, 10)
	v4.udpSum = newFieldTable(f4, ipv4HeaderLen+6)
	v6 := &frameTables.v6
	for i := range v6.vtf {
		v6.vtf[i] = newByteTable(f6 - i - 1)
	}
	v6.hopLimit = newByteTable(f6 - 7 - 1)
	v6.udpSum = newFieldTable(f6, ipv6HeaderLen+6)
}
