#!/usr/bin/env python3
"""Turns a recording of two real perftest programs (a TCP proxy's log of
"C|S <len> <python bytes repr>" lines, one per recv) into the transcript
format of ../gen.py.

Recorded with Debian bookworm's perftest 4.5+0.17 binaries on both ends,
run with LD_PRELOAD=libfakeverbs.so (../fakeverbs) and --use_old_post_send -F.

usage: convert.py LOG "test=write_bw qps=1 gid=1 duplex=0 all=0 duration=0" > NAME.txt
"""
import ast, sys

log, scen = sys.argv[1], sys.argv[2]
kv = dict(x.split("=") for x in scen.split())
msgs = []
for line in open(log):
    tag, n, rest = line.split(" ", 2)
    b = ast.literal_eval(rest.strip())
    if b:
        msgs.append((tag, b))


def q(b):
    out = []
    for c in b:
        if c in (0x22, 0x5C):
            out.append("\\" + chr(c))
        elif 0x20 <= c < 0x7F:
            out.append(chr(c))
        else:
            out.append("\\x%02x" % c)
    return '"' + "".join(out) + '"'


print("# recorded: two perftest 4.5+0.17 programs (%s), see convert.py" % scen)
print("#! " + scen)
# The unidirectional servers of write/read/atomic send an uninitialised report.
garbage_reports = kv["duplex"] == "0" and kv["test"] in ("write_bw", "read_bw", "atomic_bw")
for i, (tag, b) in enumerate(msgs):
    flag = ""
    if i < 2:
        flag = "v"
    elif garbage_reports and tag == "S" and len(b) == 8:
        flag = "?"
    print("%s%s %s" % (tag, flag, q(b)))
