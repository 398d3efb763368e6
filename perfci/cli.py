"""``perfci`` command line: parses argv, calls the stages, prints, exits 0/1/2/3."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from perfci import __version__
from perfci.baseline import GPU_BASELINE_RUNS
from perfci.errors import EXIT_USAGE, PerfCIError, UsageError
from perfci.profilers import registry

ROOT_DEFAULT = "default: under the project root (the nearest directory up with pyproject.toml, pytest.ini, " \
    "setup.cfg, tox.ini or .git):"
EPILOG = "exit codes: 0 no regression, 1 regression, 2 usage or bad input, 3 infrastructure (GPU/tool missing)"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, never a traceback
        raise UsageError(f"{self.prog}: {message}", hint=f"see `{self.prog} --help`")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="perfci", description="Performance-regression CI for GPU kernels (pytest-benchmark based).",
                epilog=EPILOG)
    p.add_argument("--version", action="version", version=f"perfci {__version__}")
    sub = p.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)

    run = sub.add_parser("run", help="run the suite, compare with baselines/<gpu>/, write the report",
                         description="Run the perf suite (default tests/perf) in pytest, compare every benchmark "
                         "with this GPU's baseline, write the report, exit with the verdict. Unknown options "
                         "go to pytest (e.g. -k EXPR, -x).", epilog=EPILOG)
    run.add_argument("--baselines", type=Path, default=None, help=f"baseline root ({ROOT_DEFAULT} baselines/)")
    run.add_argument("--results-dir", type=Path, default=None,
                     help=f"where result files go ({ROOT_DEFAULT} .perfci/results/)")
    run.add_argument("--report-dir", type=Path, default=None,
                     help=f"report output directory ({ROOT_DEFAULT} reports/latest/)")
    run.add_argument("--require-baseline", action="store_true",
                     help="exit 2 when this GPU has no baseline (default: every benchmark is NEW)")
    run.add_argument("--no-compare", action="store_true", help="measure only; no baseline comparison")
    run.add_argument("--no-confirm", action="store_true",
                     help="judge this one pass; by default a SLOWER or NOISY benchmark is re-measured once in a "
                     "fresh process and judged on the two runs pooled")
    run.add_argument("--against", metavar="REF", default=None,
                     help="git ref (e.g. the PR's merge base): benchmarks that read SLOWER or NOISY against the stored "
                     "baseline (all of them when there is none) are measured for REF's tree and this tree in "
                     "interleaved fresh processes on this GPU, and their timing verdict comes from those pairs")
    run.add_argument("--max-pairs", type=int, default=5, metavar="N",
                     help="A/B pairs at most per benchmark (default 5)")
    run.add_argument("--shard", metavar="I/N", default=None,
                     help="measure shard I of N only (a stable split of the suite's benchmarks, balanced by the "
                     "baseline's test times); combine the shards with `perfci merge`")
    run.add_argument("--profile", choices=("nsys", "ncu"), default=None,
                     help="after the run, profile its benchmarks under Nsight Systems or Compute into the report "
                     "folder; with ncu, kernels that left the compute roof or lost tensor-pipe use against the "
                     "baseline's stored ncu summary are noted")
    run.add_argument("--gpus", metavar="all|I,J,...", default=None,
                     help="one worker per GPU (pinned with CUDA_VISIBLE_DEVICES), each a shard of the suite, merged; "
                     "each GPU model is judged against its own baselines")
    run.add_argument("--fail-on-noisy", action="store_true",
                     help="exit 1 when a device-time benchmark stays NOISY after confirmation")

    abp = sub.add_parser("ab", help="same-card A/B of two git refs (or REF and the working tree)",
                         description="Measure the benchmarks of REF's tree and of REF2's (default: the working tree) "
                         "in interleaved fresh processes on this GPU, pairs until each verdict resolves the threshold "
                         "or --max-pairs, and judge them on the pairs. Unknown options go to pytest.", epilog=EPILOG)
    abp.add_argument("ref", metavar="REF", help="the reference: a commit, branch or tag of this repository")
    abp.add_argument("ref2", metavar="REF2", nargs="?", default=None, help="the candidate (default: the working tree)")
    abp.add_argument("-k", dest="keyword", default=None, help="pytest -k expression selecting benchmarks")
    abp.add_argument("--max-pairs", type=int, default=5, metavar="N", help="pairs at most per benchmark (default 5)")
    abp.add_argument("--results-dir", type=Path, default=None,
                     help=f"where result files go ({ROOT_DEFAULT} .perfci/results/)")
    abp.add_argument("--report-dir", type=Path, default=None, help="also write the report here")

    prof = sub.add_parser("profile", help="run benchmarks under a profiler and print per-benchmark kernel tables",
                          description="Run selected benchmarks under torch.profiler (--torch), Nsight Systems "
                          "(--nsys) or Nsight Compute (--ncu); print a kernel table per benchmark and keep the "
                          "report files. Unknown options go to pytest.", epilog=EPILOG)
    tool = prof.add_mutually_exclusive_group()
    for index, (name, profiler) in enumerate(registry().items()):
        tool.add_argument(f"--{name}", dest="tool", action="store_const", const=name,
                          help=profiler.help + (" (default)" if index == 0 else ""))
    prof.add_argument("-k", dest="keyword", default=None, help="pytest -k expression selecting benchmarks")
    prof.add_argument("-o", "--out", type=Path, default=Path("reports/profile"), help="where profiler files go")
    prof.add_argument("--set", dest="section_set", choices=("basic", "full"), default=None,
                      help="Nsight Compute section set (with --ncu; default basic)")
    prof.add_argument("--from", dest="source", type=Path, default=None, metavar="FILE.sqlite",
                      help="read an existing Nsight Systems SQLite export instead of running (with --nsys)")

    base = sub.add_parser("baseline", help="write or inspect this GPU's baselines", epilog=EPILOG)
    bsub = base.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser)
    upd = bsub.add_parser("update", help="write baselines/<gpu>/ atomically from a fresh run (or --from files)",
                          description="Run the perf suite (default tests/perf; give test paths to run fewer) "
                          "--runs times in fresh processes and write this GPU's baseline atomically. Unknown "
                          "options go to pytest (e.g. -k EXPR, -m MARK): only the benchmarks selected are "
                          "replaced, unless --replace.", epilog=EPILOG)
    upd.add_argument("--baselines", type=Path, default=None, help=f"baseline root ({ROOT_DEFAULT} baselines/)")
    upd.add_argument("--replace", action="store_true",
                     help="rewrite the whole baseline; by default the benchmarks measured replace their entries and "
                     "the rest (outside the paths or -k/-m selection) are kept")
    upd.add_argument("--from", dest="sources", type=Path, nargs="+", default=None, metavar="RESULTS",
                     help="result files to use instead of running the suite (their GPU model, which need not be this "
                     "machine's: e.g. a GPU runner's *_run.json files or perfci merge's output)")
    upd.add_argument("--runs", type=int, default=None,
                     help=f"fresh-process runs of the suite (default {GPU_BASELINE_RUNS} on a GPU: their spread is "
                     "each benchmark's noise floor and their mean its level; 1 in CPU mode)")
    upd.add_argument("--force", action="store_true", help="accept NOISY measurements")
    upd.add_argument("--profile", choices=("ncu",), default=None,
                     help="also profile the suite under Nsight Compute and keep its summary beside the baseline "
                     "(the reference of `perfci run --profile ncu`'s roofline findings)")
    upd.add_argument("--results-dir", type=Path, default=None)
    show = bsub.add_parser("show", help="print a GPU's baseline (default: this GPU's)", epilog=EPILOG)
    show.add_argument("gpu", nargs="?", default=None)
    show.add_argument("--baselines", type=Path, default=None)
    lst = bsub.add_parser("list", help="list the GPUs that have baselines", epilog=EPILOG)
    lst.add_argument("--baselines", type=Path, default=None)

    cmp_ = sub.add_parser("compare", help="compare two result files", epilog=EPILOG)
    cmp_.add_argument("old", type=Path)
    cmp_.add_argument("new", type=Path)
    cmp_.add_argument("--report-dir", type=Path, default=None, help="also write the report here")

    mrg = sub.add_parser("merge", help="combine shard result files into one run", epilog=EPILOG,
                         description="Combine the result files of `perfci run --shard` into one run (one GPU model; "
                         "a benchmark measured twice is refused), judged like one run by `perfci compare` and "
                         "`perfci report`.")
    mrg.add_argument("results", type=Path, nargs="+", metavar="RESULTS")
    mrg.add_argument("-o", "--out", type=Path, required=True, help="the merged result file")

    rep = sub.add_parser("report", help="HTML report + Markdown summary of result files", epilog=EPILOG,
                         description="Write report.html (self-contained), summary.md and verdict.json for result "
                         "files: with two or more, the last is judged against the first (exit code as `perfci "
                         "compare`).")
    rep.add_argument("results", type=Path, nargs="+", metavar="RESULTS")
    rep.add_argument("-o", "--out", type=Path, required=True, help="output directory")
    rep.add_argument("--history", type=Path, default=None, metavar="DIR",
                     help="older result files (*.json in DIR, oldest first by name) for the history charts")

    env = sub.add_parser("env", help="this machine's GPU fingerprint and baseline key", epilog=EPILOG)
    env.add_argument("--json", action="store_true", help="print JSON")
    env.add_argument("--baselines", type=Path, default=None)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args, rest = parser.parse_known_args(args_list)
        if rest[:1] == ["--"]:  # `perfci run -- -k gemm`: everything after -- goes to pytest
            rest = rest[1:]
        if args.verb is None:
            parser.print_help()
            return EXIT_USAGE
        takes_pytest_args = args.verb in ("run", "profile", "ab") or (args.verb == "baseline"
                                                                     and args.action == "update")
        if rest and not takes_pytest_args:
            raise UsageError(f"perfci {args.verb}: unrecognized arguments: {' '.join(rest)}",
                             hint=f"see `perfci {args.verb} --help`")
        from perfci import commands

        return commands.dispatch(args, rest)
    except PerfCIError as exc:
        print(f"perfci: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("perfci: interrupted", file=sys.stderr)
        return 3
    except BrokenPipeError:  # `perfci env | head`: the reader left; not an error of ours
        sys.stdout = None  # type: ignore[assignment]  # no flush of the closed pipe at exit
        return 0

