#!/usr/bin/env python3
"""The program's own instructions on one operation's path: from a callgrind profile taken with
--dump-instr=yes, the instructions of the program's binary (our crates, cudarc and std linked
into it; not the simulated driver, not libc) that ran at least once per operation, by function,
and with DISASM (objdump -d --no-show-raw-insn -C output) each one with its count.

  LD_LIBRARY_PATH=target/cuda-sim valgrind --tool=callgrind --dump-instr=yes \\
      --callgrind-out-file=out.event target/release/sim_count 2000 event
  scripts/hot-path.py out.event sim_count 2000 [DISASM]
"""
import collections
import re
import sys


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    profile, binary, ops = sys.argv[1], sys.argv[2], int(sys.argv[3])
    disasm = sys.argv[4] if len(sys.argv) > 4 else None
    counts, function_of, names = collections.Counter(), {}, {}
    obj = function = None
    address = 0
    after_call = False
    for line in open(profile):
        line = line.rstrip("\n")
        named = re.match(r"^(c?(?:ob|fn|fl|fi|fe))=\((\d+)\)(?: (.*))?$", line)
        if named:
            kind, index, name = named.groups()
            key = (kind.lstrip("c")[:2], index)
            if name:
                names[key] = name
            if kind == "ob":
                obj = names.get(key)
            elif kind == "fn":
                function = names.get(key)
            continue
        if line.startswith("calls="):
            after_call = True  # the next cost line is the call's inclusive cost
            continue
        cost = re.match(r"^(0x[0-9a-f]+|[+-]\d+|\*)\s+\S+\s+(\d+)", line)
        if not cost:
            continue
        position = cost.group(1)
        if position.startswith("0x"):
            address = int(position, 16)
        elif position != "*":
            address += int(position)
        if after_call:
            after_call = False
            continue
        if obj and binary in obj:
            counts[address] += int(cost.group(2))
            function_of[address] = function
    hot = {a: c for a, c in counts.items() if c >= 0.9 * ops}
    print(f"own instructions per operation: {sum(hot.values()) / ops:.1f} "
          f"({len({a // 64 for a in hot})} 64-byte code lines)")
    by_function = collections.defaultdict(list)
    for a, c in sorted(hot.items()):
        by_function[function_of[a]].append((a, c))
    text = {}
    if disasm:
        for line in open(disasm):
            m = re.match(r"^\s+([0-9a-f]+):\s+(.*)$", line)
            if m:
                text[int(m.group(1), 16)] = m.group(2)
    for name, rows in sorted(by_function.items(), key=lambda kv: -sum(c for _, c in kv[1])):
        print(f"{sum(c for _, c in rows) / ops:7.1f}  {name}")
        if disasm:
            for a, c in rows:
                print(f"         {a:x} {c / ops:5.1f}  {text.get(a, '?')}")


if __name__ == "__main__":
    main()
