"""Check perfci's Nsight runners on a GPU machine; everything goes to --out (default $OUT).

1. nsys: the runner with the nsys bundled in Nsight Compute first on PATH (it writes only a
   .qdstrm): the .qdstrm-only error and the kept file.
2. ncu: the runner over tests/data/nsight/bench_nsight.py (a bf16 GEMM and a 256 MiB copy) through
   the pytest child (or, with --standalone or when that child cannot run, this script's own
   --workload, which pushes the same ranges through perfci.ranges); the kernel table, the summary,
   the raw CSV, and a cross-check of the grouping with the ncu_report module.

Imports only perfci.nsight / nsys / ncu (and perfci.ranges for --workload).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
BENCH = "tests/data/nsight/bench_nsight.py"
NCU_HOME = Path("/opt/nvidia/nsight-compute")


def log(out: Path, name: str, text: str) -> None:
    print(f"--- {name}\n{text}", flush=True)
    with (out / "check.log").open("a", encoding="utf-8") as fh:
        fh.write(f"--- {name}\n{text}\n")


def sh(cmd: list[str], timeout: int = 120) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        return f"$ {' '.join(cmd)}\n(exit {done.returncode})\n{done.stdout[-4000:]}{done.stderr[-2000:]}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"$ {' '.join(cmd)}\n{exc}"


def workload() -> None:
    """The two benchmarks of bench_nsight.py, each once inside perfci's range named after it."""
    import torch

    from perfci.ranges import Ranges

    ranges = Ranges()
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    src = torch.randn(8192, 8192 + 64, device="cuda")[:, :8192]
    dst = torch.empty(8192, 8192, device="cuda")
    torch.cuda.synchronize()
    with ranges.range(f"{BENCH}::test_matmul_bf16"):
        torch.matmul(a, b)
    with ranges.range(f"{BENCH}::test_copy_256mib"):
        dst.copy_(src)
    torch.cuda.synchronize()
    print(f"workload done (ranges backend: {ranges.backend})")


def check_nsys(out: Path) -> None:
    from perfci.errors import PerfCIError
    from perfci.nsys import NsysProfiler

    bundled = sorted(NCU_HOME.glob("*/host/target-linux-x64/nsys"))
    if not bundled:
        log(out, "nsys", "no nsys bundled with Nsight Compute here")
        return
    log(out, "nsys version", sh([str(bundled[-1]), "--version"], 60))
    bindir = Path(tempfile.mkdtemp())
    (bindir / "nsys").symlink_to(bundled[-1])
    os.environ["PATH"] = f"{bindir}{os.pathsep}{os.environ['PATH']}"
    started = time.time()
    try:
        run = NsysProfiler().run([BENCH, "-k", "copy"], out / "nsys")
        log(out, "nsys run (unexpected success)", run.table())
    except PerfCIError as exc:
        log(out, f"nsys error, exit {exc.exit_code}", str(exc))
    finally:
        os.environ["PATH"] = os.environ["PATH"].split(os.pathsep, 1)[1]
    kept = [p for p in (out / "nsys").rglob("*") if p.is_file()]
    files = sorted(f"{p.relative_to(out)} ({p.stat().st_size} B)" for p in kept)
    log(out, f"nsys files ({time.time() - started:.0f} s)", "\n".join(files) or "(none)")


def check_ncu(out: Path, standalone: bool, section_set: str) -> None:
    from perfci.errors import PerfCIError
    from perfci.ncu import NcuProfiler

    started = time.time()
    run = None
    if not standalone:
        try:
            run = NcuProfiler().run([BENCH], out / "ncu", {"set": section_set})
        except PerfCIError as exc:
            log(out, f"ncu via pytest failed, exit {exc.exit_code}", str(exc))
        if run is not None and not any("::" in r.benchmark for r in run.rows):
            log(out, "ncu via pytest grouped nothing", run.table())
            run = None
    if run is None:
        try:
            run = NcuProfiler(section_set).profile_command([sys.executable, __file__, "--workload"], out / "ncu")
        except PerfCIError as exc:
            log(out, f"ncu standalone failed, exit {exc.exit_code}", str(exc))
            return
    log(out, f"ncu table ({time.time() - started:.0f} s)", run.table())
    log(out, "ncu summary", json.dumps(json.loads(run.summary.read_text()), indent=1)[:12000])
    cross_check(out, next(p for p in run.files if p.suffix == ".ncu-rep"))


def cross_check(out: Path, report: Path) -> None:
    """The NVTX state of every profiled kernel as the ncu_report module reads it."""
    extras = sorted(NCU_HOME.glob("*/extras/python"))
    if not extras:
        log(out, "ncu_report", "no extras/python here")
        return
    sys.path.insert(0, str(extras[-1]))
    try:
        import ncu_report

        ctx = ncu_report.load_report(str(report))
        lines = []
        for r in range(ctx.num_ranges()):
            rng = ctx.range_by_idx(r)
            for i in range(rng.num_actions()):
                action = rng.action_by_idx(i)
                state = action.nvtx_state()
                stacks = [f"{state.domain_by_id(d).name()}: {list(state.domain_by_id(d).push_pop_ranges())}"
                          for d in state.domains()]
                lines.append(f"{action.name()[:70]} | {' | '.join(stacks)}")
                if r == 0 and i == 0:
                    names = sorted(action.metric_names())
                    lines.append(f"  {len(names)} metrics; tensor: {[n for n in names if 'tensor' in n][:40]}")
        log(out, "ncu_report NVTX per kernel", "\n".join(lines))
    except Exception as exc:  # a diagnostic only
        log(out, "ncu_report failed", repr(exc))


def guarded(out: Path, name: str, fn, *args) -> None:
    """Run one check; a crash is logged with its traceback and the other checks still run."""
    import traceback

    try:
        fn(*args)
    except Exception:
        log(out, f"{name} crashed", traceback.format_exc())
        report = out / "ncu" / "perfci.ncu-rep"
        if name == "ncu" and report.exists():
            cross_check(out, report)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "nsight_check_out")))
    parser.add_argument("--standalone", action="store_true", help="profile --workload, not the pytest child")
    parser.add_argument("--workload", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--skip-nsys", action="store_true")
    parser.add_argument("--set", dest="section_set", default="basic", choices=("basic", "full"))
    args = parser.parse_args()
    if args.workload:
        workload()
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    os.chdir(ROOT)
    log(args.out, "device", sh(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm", "--format=csv"]))
    log(args.out, "ncu", sh([shutil.which("ncu") or "ncu", "--version"], 60))
    if not args.skip_nsys:
        guarded(args.out, "nsys", check_nsys, args.out)
    guarded(args.out, "ncu", check_ncu, args.out, args.standalone, args.section_set)
    grep = "ncu --query-metrics | grep -E 'tensor|dram__bytes |sass_thread_inst_executed_op_[fdh]' | head -80"
    guarded(args.out, "metrics", lambda: log(args.out, "ncu tensor metrics", sh(["sh", "-c", grep])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
