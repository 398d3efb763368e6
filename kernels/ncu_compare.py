"""One kernel beside another from their ncu exports: chosen metrics, then the executed SASS by opcode.

    ncu -i ours.ncu-rep --page raw --csv > ours_raw.csv
    ncu -i ours.ncu-rep --page source --csv --print-source sass > ours_sass.csv
    python3 -m kernels.ncu_compare --ours ours_raw.csv ours_sass.csv attn_fwd_ws --ref ref_raw.csv ref_sass.csv cudnn

Each side is a raw-page export, a source-page export and a regular expression that picks the kernel (the first
launch whose name matches).  Metrics print in base units (``perfci.ncu``, the raw page's owner, converts them);
opcodes are the SASS mnemonic with its modifiers and without its predicate, each with the warps' executed count
and the warp-stall samples on it.  Session 35 found the 16-bit forward's byte permutes this way: the same
instruction count as cuDNN's forward but for 9.2M ``PRMT`` it does not have (kernels/NOTES.md); the summaries
in ``docs/measurements/kernels_h200_s35_call{1,7}_ncu_summary.txt`` are its output.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from perfci.ncu import parse_ncu_raw_csv, parse_number

METRICS = (
    "gpu__time_duration.sum", "sm__cycles_active.avg", "sm__cycles_elapsed.avg", "smsp__inst_executed.sum",
    "smsp__warps_active.avg.per_cycle_active", "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active",
    "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
    "dram__bytes_read.sum", "dram__bytes_write.sum",
)
STALL = re.compile(r"smsp__pcsamp_warps_issue_stalled_[a-z_]+$(?<!_not_issued)")  # all samples, not "not issued"
_OPCODE = re.compile(r"(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)")  # HGMMA.64x128x16.F32.BF16


@dataclass(frozen=True)
class Side:
    """One kernel's figures: its name, its metrics (base units), its opcodes (executed, stall samples) and their
    shared-memory wavefronts (all, excessive: beyond a conflict-free access's)."""

    kernel: str
    metrics: dict[str, float]
    opcodes: dict[str, tuple[int, int]]
    shared: dict[str, tuple[int, int]]


def _pick(names: Sequence[str], pattern: str, what: str) -> str:
    found = next((n for n in names if re.search(pattern, n)), None)
    if found is None:
        raise LookupError(f"no kernel matching {pattern!r} in the {what} (kernels: "
                          f"{', '.join(sorted(set(names)))[:300]})")
    return found


def raw_metrics(text: str, pattern: str) -> tuple[str, dict[str, float]]:
    """The first launch of a raw-page export whose kernel name matches ``pattern``: (name, metrics)."""
    launches = parse_ncu_raw_csv(text)
    name = _pick([launch.kernel for launch in launches], pattern, "raw export")
    return name, dict(next(launch for launch in launches if launch.kernel == name).values)


def _int(cell: str | None) -> int:
    """A count cell as an int; 0 where the column does not apply ("-")."""
    return int(parse_number(cell or "0") or 0)


def sass_opcodes(text: str, pattern: str) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]]]:
    """By opcode, for the kernel matching ``pattern`` in a source-page export (``--page source --csv
    --print-source sass``: per kernel a "Kernel Name" row, a header row starting with "Address", then one row per
    SASS instruction): (executed warp instructions, stall samples) and (shared wavefronts, excessive ones)."""
    rows = list(csv.reader(io.StringIO(text)))
    kernels = [r[1] for r in rows if len(r) > 1 and r[0] == "Kernel Name"]
    name = _pick(kernels, pattern, "source export")
    executed: Counter[str] = Counter()
    stalls: Counter[str] = Counter()
    waves: Counter[str] = Counter()
    excess: Counter[str] = Counter()
    current, header = None, None
    for row in rows:
        if row and row[0] == "Kernel Name":
            current, header = (row[1] if len(row) > 1 else None), None
        elif row and row[0] == "Address":
            header = row
        elif current == name and header and len(row) >= len(header):
            cell = dict(zip(header, row[:len(header)], strict=True))
            m = _OPCODE.match(cell.get("Source", "").strip())
            if m:
                op = m.group(1)
                executed[op] += _int(cell.get("Instructions Executed"))
                stalls[op] += _int(cell.get("Warp Stall Sampling (All Samples)"))
                waves[op] += _int(cell.get("L1 Wavefronts Shared"))
                excess[op] += _int(cell.get("L1 Wavefronts Shared Excessive"))
    return ({op: (executed[op], stalls[op]) for op in executed},
            {op: (waves[op], excess[op]) for op in waves if waves[op]})


def load(raw: Path, sass: Path, pattern: str) -> Side:
    kernel, metrics = raw_metrics(raw.read_text(), pattern)
    return Side(kernel, metrics, *sass_opcodes(sass.read_text(), pattern))


def _fmt(v: float | None) -> str:
    return "—" if v is None else f"{v:.6g}"


def report(ours: Side, ref: Side, top: int = 40, metrics: Sequence[str] = METRICS) -> str:
    """Both sides' metrics (``metrics`` and every stall-sample counter either side has), then the ``top``
    opcodes by their summed executed count."""
    lines = [f"ours: {ours.kernel}", f"ref:  {ref.kernel}", "", f"{'metric':64s} {'ours':>14s} {'ref':>14s}"]
    stalls = sorted(k for k in {*ours.metrics, *ref.metrics} if STALL.match(k))
    for name in [*metrics, *stalls]:
        if name in ours.metrics or name in ref.metrics:
            lines.append(f"{name:64s} {_fmt(ours.metrics.get(name)):>14s} {_fmt(ref.metrics.get(name)):>14s}")
    lines += ["", f"{'opcode (executed warp instructions, stall samples)':52s} {'ours':>22s} {'ref':>22s}"]
    ops = sorted({*ours.opcodes, *ref.opcodes},
                 key=lambda op: (-(ours.opcodes.get(op, (0, 0))[0] + ref.opcodes.get(op, (0, 0))[0]), op))
    for op in ops[:top]:
        (a, sa), (b, sb) = ours.opcodes.get(op, (0, 0)), ref.opcodes.get(op, (0, 0))
        lines.append(f"{op:52s} {a:>13d} ({sa:>6d}) {b:>13d} ({sb:>6d})")
    total = [sum(n for n, _ in side.opcodes.values()) for side in (ours, ref)]
    lines.append(f"{'total':52s} {total[0]:>22d} {total[1]:>22d}")
    shared = sorted({*ours.shared, *ref.shared}, key=lambda op: (-(ours.shared.get(op, (0, 0))[0]
                                                                   + ref.shared.get(op, (0, 0))[0]), op))
    if shared:
        lines += ["", f"{'opcode (shared wavefronts, excessive ones)':52s} {'ours':>26s} {'ref':>26s}"]
        for op in shared:
            (a, xa), (b, xb) = ours.shared.get(op, (0, 0)), ref.shared.get(op, (0, 0))
            lines.append(f"{op:52s} {a:>12d} ({xa:>11d}) {b:>12d} ({xb:>11d})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="one kernel beside another from their ncu raw and source exports",
        epilog="exports: ncu -i R.ncu-rep --page raw --csv > R_raw.csv; ncu -i R.ncu-rep --page source --csv "
               "--print-source sass > R_sass.csv (a report of ncu --set full has every column used here)")
    side = ("RAW_CSV", "SASS_CSV", "KERNEL_REGEX")
    ap.add_argument("--ours", nargs=3, metavar=side, required=True,
                    help="our kernel: its raw-page and source-page exports and a regex of its name (first match)")
    ap.add_argument("--ref", nargs=3, metavar=side, required=True, help="the reference kernel, likewise")
    ap.add_argument("--top", type=int, default=40, help="opcodes to list (default 40)")
    args = ap.parse_args(argv)
    sides = []
    for raw, sass, pattern in (args.ours, args.ref):
        for path in (raw, sass):
            if not Path(path).is_file():
                ap.error(f"no such file: {path}")
        try:
            sides.append(load(Path(raw), Path(sass), pattern))
        except LookupError as exc:  # a regex that names no kernel of the export: bad input, exit code 2
            ap.error(str(exc))
    print(report(*sides, top=args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
