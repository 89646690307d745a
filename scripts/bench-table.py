#!/usr/bin/env python3
"""BENCHMARKS.md's current table from several gpu_bench runs of one machine.

    scripts/bench-table.py run1.log run2.log ...   # each the output of `.gpu/gpu_bench core`

Every run prints rows `| op | variant | median ns/op | ratio to first row |`; for each row
this prints the median over the runs of the ns and of the ratio, and the ratio's spread (the
lowest and highest run), in the order the rows first appear. Latency rows
(`p50 N / p99 M | a / b`) are summarised the same way for both percentiles.
"""
import re
import statistics
import sys


def rows(path):
    op = None
    for line in open(path, encoding="utf-8", errors="replace"):
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("op", "---"):
            continue
        op = cells[0] or op
        yield op, cells[1], cells[2], cells[3]


def main(paths):
    if not paths:
        sys.exit(__doc__)
    table = {}
    for path in paths:
        for op, variant, ns, ratio in rows(path):
            table.setdefault((op, variant), []).append((ns, ratio))
    print(f"| op | variant | ns (median of {len(paths)}) | ratio to raw (median) | ratio spread |")
    print("|---|---|---|---|---|")
    last_op = None
    for (op, variant), runs in table.items():
        numbers = [
            [float(x) for x in re.findall(r"(?<![a-z0-9.])[0-9.]+", f"{ns} {ratio}")]
            for ns, ratio in runs
        ]
        width = min(len(n) for n in numbers)
        if width == 2:
            ns = statistics.median(n[0] for n in numbers)
            ratios = [n[1] for n in numbers]
            cells = (f"{ns:.1f}", f"{statistics.median(ratios):.3f}",
                     f"{min(ratios):.3f}–{max(ratios):.3f}")
        elif width == 4:
            p50 = statistics.median(n[0] for n in numbers)
            p99 = statistics.median(n[1] for n in numbers)
            r50 = [n[2] for n in numbers]
            r99 = [n[3] for n in numbers]
            cells = (f"p50 {p50:.0f} / p99 {p99:.0f}",
                     f"{statistics.median(r50):.3f} / {statistics.median(r99):.3f}",
                     f"{min(r50):.3f}–{max(r50):.3f} / {min(r99):.3f}–{max(r99):.3f}")
        else:
            continue
        shown = op if op != last_op else ""
        last_op = op
        print(f"| {shown} | {variant} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main(sys.argv[1:])
