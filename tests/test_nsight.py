"""Nsight Systems reader and runner, Nsight Compute parser, roofline and runner: CPU only.

The nsys exports are real SQLite databases built here with the tables and columns of the Nsight
Systems SQLite schema reference; the ncu CSV is a real ``ncu --import --csv --page raw --print-units
base`` export from an H100 (tests/data/nsight/ncu_raw_h100.csv) plus small ones laid out the same
way. The tools are stood in for by small executable scripts first on PATH.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from perfci.errors import EXIT_INFRASTRUCTURE, EXIT_USAGE, BadInputError, InfrastructureError
from perfci.kernelrows import NO_RANGE, format_rows
from perfci.ncu import (
    NVTX_FILTER,
    NcuProfiler,
    benchmark_of_nvtx,
    parse_ncu_raw_csv,
    summarise,
    tensor_metrics,
    to_base_units,
)
from perfci.nsight import is_benchmark_range
from perfci.nsys import NsysProfiler, read_nsys_sqlite

DATA = Path(__file__).parent / "data" / "nsight"
PID, OTHER_PID, T1, T2 = 100, 200, 101, 102
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
TRITON = "triton_per_fused_add_0"
FILL = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
        "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)")
COPY = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::"
        "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(float)#1}>"
        "(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}"
        "::operator()() const::{lambda(float)#1} const&)::{lambda(int)#1}>(int, {lambda(int)#1})")
A = "tests/perf/test_a.py::test_gemm[1024]"  # registered string, domain perfci
G = "tests/perf/test_b.py::test_graph"  # inline string, default domain (torch.cuda.nvtx fallback)
H = "tests/perf/test_c.py::test_thread"  # second thread
E = "tests/perf/test_d.py::test_empty"
B = "tests/perf/test_d.py::test_boundary"

SCHEMA = """
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER PRIMARY KEY, name TEXT, label TEXT);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
    category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER,
    textId INTEGER REFERENCES StringIds(id), domainId INTEGER, uint64Value INTEGER, int64Value INTEGER,
    doubleValue REAL, uint32Value INTEGER, int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,
    globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL REFERENCES StringIds(id),
    returnValue INTEGER NOT NULL, callchainId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
    demangledName INTEGER NOT NULL REFERENCES StringIds(id), shortName INTEGER NOT NULL REFERENCES StringIds(id),
    mangledName INTEGER, launchType INTEGER, cacheConfig INTEGER, registersPerThread INTEGER NOT NULL,
    gridX INTEGER NOT NULL, gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL,
    blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL, staticSharedMemory INTEGER NOT NULL,
    dynamicSharedMemory INTEGER NOT NULL, localMemoryPerThread INTEGER NOT NULL, localMemoryTotal INTEGER NOT NULL,
    gridId INTEGER NOT NULL, sharedMemoryExecuted INTEGER, graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
    bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, deprecatedSrcId INTEGER, srcKind INTEGER, dstKind INTEGER,
    srcDeviceId INTEGER, srcContextId INTEGER, dstDeviceId INTEGER, dstContextId INTEGER, migrationCause INTEGER,
    graphNodeId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
    value INTEGER NOT NULL, bytes INTEGER NOT NULL, graphNodeId INTEGER, memKind INTEGER);
"""


def gtid(pid: int, tid: int) -> int:
    """Serialized GlobalId: pid in bits 24..47, tid in bits 0..23."""
    return (pid << 24) | tid


class Export:
    """A small nsys SQLite export, written row by row with the documented columns."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path)
        self.db.executescript(SCHEMA)
        self.db.executemany("INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES (?, ?, ?)",
                            [(59, "NvtxPushPopRange", "NVTX PushPop Range"),
                             (60, "NvtxStartEndRange", "NVTX StartEnd Range"),
                             (75, "NvtxDomainCreate", "NVTX Domain Create")])
        self.strings: dict[str, int] = {}

    def sid(self, value: str) -> int:
        if value not in self.strings:
            self.strings[value] = len(self.strings) + 1
            self.db.execute("INSERT INTO StringIds VALUES (?, ?)", (self.strings[value], value))
        return self.strings[value]

    def domain(self, name: str, domain_id: int) -> None:
        self.db.execute("INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) VALUES (0, 75, ?, ?, ?)",
                        (name, gtid(PID, T1), domain_id))

    def range(self, name: str, start: int, end: int, tid: int = T1, *, registered: bool = False,
              domain_id: int = 0, event_type: int = 59) -> None:
        text, text_id = (None, self.sid(name)) if registered else (name, None)
        self.db.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId, domainId) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (start, end, event_type, text, gtid(PID, tid), text_id, domain_id))

    def call(self, api: str, start: int, corr: int, tid: int = T1, pid: int = PID) -> None:
        self.db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 1, ?, ?, ?, 0, NULL)",
                        (start, start + 5, gtid(pid, tid), corr, self.sid(api)))

    def kernel(self, name: str, start: int, end: int, corr: int, *, graph_node: int | None = None,
               pid: int = PID) -> None:
        self.db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 1, 7, ?, ?, ?, ?, NULL, 0, 0, 32, "
                        "1, 1, 1, 128, 1, 1, 0, 0, 0, 0, 1, 0, ?, 0)",
                        (start, end, corr, gtid(pid, 0), self.sid(name), self.sid(name[:20]), graph_node))

    def memcpy(self, start: int, end: int, corr: int, n_bytes: int, kind: int) -> None:
        self.db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, streamId, "
                        "correlationId, globalPid, bytes, copyKind) VALUES (?, ?, 0, 1, 7, ?, ?, ?, ?)",
                        (start, end, corr, gtid(PID, 0), n_bytes, kind))

    def memset(self, start: int, end: int, corr: int, n_bytes: int) -> None:
        self.db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (?, ?, 0, 1, 7, ?, ?, 0, ?, NULL, 0)",
                        (start, end, corr, gtid(PID, 0), n_bytes))

    def close(self) -> None:
        self.db.commit()
        self.db.close()


@pytest.fixture
def export(tmp_path: Path) -> Path:
    """Every case of the issue in one capture (times in ns)."""
    path = tmp_path / "capture.sqlite"
    x = Export(path)
    x.domain("perfci", 1)
    # A (registered, perfci) on thread 1, with a non-benchmark range nested inside it
    x.range(A, 1000, 5000, registered=True, domain_id=1)
    x.range("aten::mm", 1200, 2000)
    x.call("cudaLaunchKernel_v7000", 1500, corr=1)  # inside aten::mm inside A: A's
    x.kernel(GEMM, 3000, 9000, corr=1)  # runs long after A closed at 5000: still A's
    x.call("cudaMemcpyAsync_v3020", 2500, corr=2)
    x.memcpy(2600, 3000, corr=2, n_bytes=4096, kind=1)
    x.call("cudaMemsetAsync_v3020", 4000, corr=3)
    x.memset(9000, 9100, corr=3, n_bytes=1024)
    x.call("cuLaunchKernel", 2000, corr=7)  # while thread 2's range H is open: still A's (thread 1)
    x.kernel(TRITON, 4500, 4600, corr=7)
    # perfci's profiling pass, nested in A: kept apart
    x.range(f"{A} [profile]", 4200, 4900, registered=True, domain_id=1)
    x.call("cudaLaunchKernel_v7000", 4300, corr=4)
    x.kernel(COPY, 9100, 9600, corr=4)
    # thread 2: H overlaps A in time, and is entered twice (nested)
    x.range(H, 1500, 3500, tid=T2, registered=True, domain_id=1)
    x.range(H, 1600, 1700, tid=T2, registered=True, domain_id=1)
    x.call("cudaLaunchKernel_v7000", 2000, corr=6, tid=T2)
    x.kernel(FILL, 2100, 2600, corr=6)
    # a CUDA graph: one cudaGraphLaunch, three node kernels with its correlationId
    x.range(G, 6000, 7000)
    x.call("cudaGraphLaunch_v10000", 6100, corr=5)
    x.kernel(TRITON, 9600, 9700, corr=5, graph_node=11)
    x.kernel(GEMM, 9700, 9900, corr=5, graph_node=12)
    x.kernel(TRITON, 9900, 10000, corr=5, graph_node=13)
    # a start/end range starting exactly when G ends: a call at 7000 is B's, not G's
    x.range(B, 7000, 7500, event_type=60)
    x.call("cudaLaunchKernel_v7000", 7000, corr=8)
    x.kernel(FILL, 10000, 10050, corr=8)
    x.range(E, 8000, 8500)  # no kernels
    # outside every benchmark range: a warm-up range, and another process reusing correlationId 1
    x.range("warmup", 500, 900)
    x.call("cudaLaunchKernel_v7000", 600, corr=9)
    x.kernel(FILL, 600, 700, corr=9)
    x.call("cudaLaunchKernel_v7000", 1500, corr=1, pid=OTHER_PID)
    x.kernel(GEMM, 100, 150, corr=1, pid=OTHER_PID)
    x.close()
    return path


def test_reader_assigns_by_launching_call_not_by_time(export: Path) -> None:
    capture = read_nsys_sqlite(export)
    assert sorted(capture.ranges) == sorted([A, f"{A} [profile]", B, E, G, H])
    a = capture.ranges[A]
    assert a.domain == "perfci" and a.instances == 1
    assert (a.kernel_count, a.kernel_time_ms, a.late_kernel_count) == (2, 0.0061, 1)
    assert [(k.name, k.category, k.count, k.time_ms) for k in a.kernels] == [
        (GEMM, "gemm", 1, 0.006), (TRITON, "triton", 1, 0.0001)]
    assert (a.memcpy_count, a.memcpy_bytes, a.memcpy_time_ms) == (1, 4096, 0.0004)
    assert (a.memset_count, a.memset_bytes, a.memset_time_ms) == (1, 1024, 0.0001)
    assert a.range_time_ms == 0.004
    assert a.overhead_ms == pytest.approx(0.004 - 0.0061)
    profile = capture.ranges[f"{A} [profile]"]
    assert [(k.name, k.category, k.count, k.time_ms) for k in profile.kernels] == [
        ("elementwise_kernel<direct_copy_kernel_cuda>", "copy", 1, 0.0005)]


def test_reader_graph_threads_boundaries_and_empty_ranges(export: Path) -> None:
    capture = read_nsys_sqlite(export)
    g = capture.ranges[G]
    assert g.domain == "(default)"
    assert (g.kernel_count, g.graph_kernel_count, g.kernel_time_ms, g.range_time_ms) == (3, 3, 0.0004, 0.001)
    assert [(k.name, k.count, k.time_ms) for k in g.kernels] == [(GEMM, 1, 0.0002), (TRITON, 2, 0.0002)]
    h = capture.ranges[H]
    assert (h.instances, h.range_time_ms, h.kernel_count, h.kernel_time_ms) == (2, 0.002, 1, 0.0005)
    assert [(k.category, k.kind) for k in h.kernels] == [("elementwise", "")]
    assert (capture.ranges[B].kernel_count, capture.ranges[B].kernel_time_ms) == (1, 0.00005)
    e = capture.ranges[E]
    assert (e.kernel_count, e.kernel_time_ms, e.memcpy_count, e.range_time_ms, e.overhead_ms) == (0, 0.0, 0, 0.0005,
                                                                                                  0.0005)
    # the warm-up kernel and the other process's kernel with a reused correlationId belong to no range
    assert (capture.unassigned_kernel_count, capture.unassigned_kernel_time_ms) == (2, 0.00015)
    assert capture.other_ranges == ("aten::mm", "warmup")


def test_summary_json_rows_and_table(export: Path, tmp_path: Path) -> None:
    run = NsysProfiler().read(export, tmp_path / "out")
    assert run.summary == tmp_path / "out" / "nsys_summary.json"
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["nsys_summary.json"]  # no temp file left
    doc = json.loads(run.summary.read_text())
    assert doc["schema_version"] == 1 and doc["source"] == str(export)
    a = doc["ranges"][A]
    assert {k: a[k] for k in ("kernel_count", "kernel_time_ms", "memcpy_count", "memcpy_bytes")} == {
        "kernel_count": 2, "kernel_time_ms": 0.0061, "memcpy_count": 1, "memcpy_bytes": 4096}
    assert a["kernels"][0] == {"name": GEMM, "category": "gemm", "kind": "", "count": 1, "time_ms": 0.006}
    assert doc["unassigned"] == {"kernel_count": 2, "kernel_time_ms": 0.00015}
    rows = [r for r in run.rows if r.benchmark == A]
    assert [(r.name, r.category, r.kind, r.count) for r in rows] == [
        (GEMM, "gemm", "", 1), (TRITON, "triton", "", 1), ("Memcpy HtoD", "memcpy", "h2d", 1),
        ("Memset", "memset", "", 1)]
    assert rows[0].metrics["share_pct"] == pytest.approx(100 * 6000 / 6100)
    table = run.table()
    assert f"== {A}  (4 launches" in table and "Memcpy HtoD" in table


def test_read_rejects_bad_files(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="no such file") as missing:
        NsysProfiler().read(tmp_path / "nope.sqlite")
    text = tmp_path / "report.sqlite"
    text.write_text("not a database\n" * 100)
    with pytest.raises(BadInputError, match="not a readable Nsight Systems SQLite export") as not_sqlite:
        read_nsys_sqlite(text)
    bare = tmp_path / "bare.sqlite"
    sqlite3.connect(bare).execute("CREATE TABLE StringIds (id INTEGER, value TEXT)").connection.close()
    with pytest.raises(BadInputError, match="no NVTX_EVENTS table") as no_nvtx:
        read_nsys_sqlite(bare)
    for err in (missing, not_sqlite, no_nvtx):
        assert err.value.exit_code == EXIT_USAGE and "\n" not in str(err.value)
    only_other = tmp_path / "other.sqlite"
    x = Export(only_other)
    x.range("warmup", 0, 10)
    x.close()
    with pytest.raises(BadInputError, match="no perfci benchmark range"):
        NsysProfiler().read(only_other)


def test_benchmark_range_names() -> None:
    assert is_benchmark_range("tests/perf/test_x.py::test_y[bf16-1024]")
    assert is_benchmark_range("tests/perf/test_x.py::TestK::test_y [profile]")
    assert not is_benchmark_range("aten::mm")
    assert not is_benchmark_range("void at::native::foo")
    assert not is_benchmark_range("")


# --- the tools, stood in for by scripts first on PATH ------------------------------------------------


def tool(bin_dir: Path, name: str, body: str) -> Path:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "bin"
    directory.mkdir()
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ['PATH']}")
    return directory


@pytest.fixture
def selection(tmp_path: Path) -> list[str]:
    test_file = tmp_path / "sel" / "test_sel.py"
    test_file.parent.mkdir()
    test_file.write_text("def test_one():\n    pass\n")
    return [str(test_file)]


def test_missing_tools_are_exit_3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(InfrastructureError, match=r"nsys is not on PATH.*install Nsight Systems") as nsys:
        NsysProfiler().run(["tests"], tmp_path / "out")
    with pytest.raises(InfrastructureError, match=r"ncu is not on PATH.*install Nsight Compute") as ncu:
        NcuProfiler().run(["tests"], tmp_path / "out")
    assert nsys.value.exit_code == ncu.value.exit_code == EXIT_INFRASTRUCTURE


# the nsys bundled with Nsight Compute: it writes the raw stream, and no report without its importer
QDSTRM_ONLY = 'for a in "$@"; do case "$a" in --output=*) out="${a#--output=}";; esac; done\n: > "$out.qdstrm"\n'


def test_qdstrm_only_is_exit_3_and_kept(bin_dir: Path, tmp_path: Path, selection: list[str]) -> None:
    tool(bin_dir, "nsys", QDSTRM_ONLY)
    out = tmp_path / "out"
    with pytest.raises(InfrastructureError) as err:
        NsysProfiler().run(selection, out)
    assert err.value.exit_code == EXIT_INFRASTRUCTURE
    assert f"nsys wrote only {out / 'perfci.qdstrm'} (kept)" in str(err.value)
    assert "QdstrmImporter" in str(err.value)
    assert (out / "perfci.qdstrm").is_file()


def test_no_range_matched_names_the_expected_ranges(bin_dir: Path, tmp_path: Path, selection: list[str]) -> None:
    other = tmp_path / "other.sqlite"
    x = Export(other)
    x.range("warmup", 0, 10)
    x.close()
    tool(bin_dir, "nsys", f"""for a in "$@"; do case "$a" in --output=*) out="${{a#--output=}}";; esac; done
if [ "$1" = profile ]; then : > "$out.nsys-rep"; else cp "{other}" "$out"; fi
""")
    with pytest.raises(InfrastructureError) as err:
        NsysProfiler().run(selection, tmp_path / "out")
    message = str(err.value)
    assert err.value.exit_code == EXIT_INFRASTRUCTURE
    assert "no perfci benchmark range in the nsys capture" in message
    assert "test_sel.py::test_one" in message and "ranges seen: warmup" in message
    assert (tmp_path / "out" / "perfci.nsys-rep").is_file() and (tmp_path / "out" / "perfci.sqlite").is_file()


def test_nsys_runner_end_to_end(bin_dir: Path, tmp_path: Path, export: Path, selection: list[str]) -> None:
    log = tmp_path / "nsys.args"
    tool(bin_dir, "nsys", f"""echo "$@" >> "{log}"
for a in "$@"; do case "$a" in --output=*) out="${{a#--output=}}";; esac; done
if [ "$1" = profile ]; then : > "$out.nsys-rep"; else cp "{export}" "$out"; fi
""")
    run = NsysProfiler().run(selection, tmp_path / "out")
    profile, export_cmd = log.read_text().splitlines()
    assert profile.startswith("profile --trace=cuda,nvtx --cuda-graph-trace=node ")
    assert f"--output={tmp_path / 'out' / 'perfci'} " in profile and "--benchmark-disable" in profile
    assert export_cmd.startswith("export --type=sqlite ")
    assert [p.name for p in run.files] == ["perfci.nsys-rep", "perfci.sqlite", "nsys_summary.json"]
    assert json.loads(run.summary.read_text())["ranges"][G]["kernel_count"] == 3


# --- Nsight Compute -------------------------------------------------------------------------------


def test_real_h100_export_groups_per_benchmark_and_places_on_the_roofline() -> None:
    launches = parse_ncu_raw_csv((DATA / "ncu_raw_h100.csv").read_text())
    bench = "tests/data/nsight/bench_nsight.py::"
    assert [la.benchmark for la in launches] == [f"{bench}test_matmul_bf16", f"{bench}test_copy_256mib"]
    names = {key.split(".")[0] for la in launches for key in la.values}
    by_name = {s.row.benchmark.removeprefix(bench): s for s in summarise(launches, tensor_metrics(names))}
    gemm, copy = by_name["test_matmul_bf16"], by_name["test_copy_256mib"]
    assert (gemm.row.category, copy.row.category) == ("gemm", "copy")
    assert gemm.precision == "tensor_src_bf16_dst_fp32"
    assert gemm.row.metrics["flops"] == 2 * 4096**3  # the tensor ops path counts FLOPs, each once
    assert gemm.row.time_ms == pytest.approx(0.180288)
    dense_peak = 1081344 / 2 * 1565362087.33  # ncu's ops-path peak is the 2:4-sparse rate
    assert gemm.row.metrics["pct_peak_flops"] == pytest.approx(100 * 2 * 4096**3 / 180288e-9 / dense_peak)
    assert 89 < gemm.row.metrics["pct_peak_flops"] < 91  # ncu's tensor pipe: 90.07 % of elapsed cycles
    assert gemm.row.metrics["intensity_flop_per_byte"] == pytest.approx(2 * 4096**3 / (150340608 + 28291840))
    assert (gemm.row.metrics["registers"], gemm.row.metrics["shared_bytes"]) == (168, 213188)
    assert gemm.row.metrics["tensor_pct"] == pytest.approx(94.85)
    assert gemm.row.metrics["occupancy_pct"] == pytest.approx(14.64)
    assert copy.row.metrics["dram_bytes"] == 268459008 + 252344832
    assert copy.row.metrics["pct_peak_bandwidth"] == pytest.approx(copy.row.metrics["dram_throughput_pct"], abs=0.01)
    assert copy.row.metrics["pct_peak_flops"] < 1 < 70 < copy.row.metrics["pct_peak_bandwidth"]


def raw_csv(rows: list[list[str]], metrics: dict[str, str]) -> str:
    """An ncu raw-page CSV: header, units row, one row per launch (as ncu --csv --page raw prints it)."""
    nvtx = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
    header = ["ID", "Process ID", "Process Name", "Host Name", nvtx,
              "Id:Domain:Start/Stop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg", "Kernel Name", *metrics]
    buf = io.StringIO()
    writer = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerows([header, ["", "", "", "", "", "", "", *metrics.values()], *rows])
    return "==PROF== Disconnected from process 42\n" + buf.getvalue()


def test_nvtx_cells_and_units() -> None:
    name = "tests/x.py::test_k[a:b]"  # ':' inside the parameter id
    nested = (f'42  "<default domain>:outer:none:none:none:none:none:none"  '
              f'"perfci:{name}:none:none:RGB:0xff:REGISTERED:{name}" ')
    assert benchmark_of_nvtx(nested) == name
    assert benchmark_of_nvtx('7  "<default domain>:tests/y.py::test_z:none:none:none:none:none:none" ') == \
        "tests/y.py::test_z"
    assert benchmark_of_nvtx('7  "<default domain>:aten::mm:none:none:none:none:none:none" ') == NO_RANGE
    assert benchmark_of_nvtx("") == NO_RANGE
    assert to_base_units(12.5, "usecond") == pytest.approx(12.5e-6)
    assert to_base_units(3.0, "ns") == pytest.approx(3e-9)
    assert to_base_units(2.0, "Kbyte") == 2000.0
    assert to_base_units(1.5, "Ghz") == 1.5e9
    assert to_base_units(2.0, "Tbyte/s") == 2e12
    assert to_base_units(4.0, "Kbyte/cycle") == 4000.0
    assert to_base_units(7.0, "1/ns") == pytest.approx(7e9)
    assert to_base_units(42.0, "%") == 42.0


ROOF_METRICS = {
    "gpu__time_duration.sum": "usecond", "dram__bytes_read.sum": "Kbyte", "dram__bytes_write.sum": "Kbyte",
    "dram__bytes.sum.peak_sustained": "byte/cycle", "dram__cycles_elapsed.avg.per_second": "Ghz",
    "sm__cycles_elapsed.avg.per_second": "Ghz",
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum": "inst",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": "inst",
    "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained": "inst/cycle",
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum": "", "sm__ops_path_tensor_src_bf16_dst_fp32.sum.peak_sustained": "",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "%",
    "launch__registers_per_thread": "register/thread",
}


def test_roofline_arithmetic_and_grouping() -> None:
    bench = "tests/x.py::test_mm"
    cell = f'42  "perfci:{bench}:none:none:RGB:0xff:REGISTERED:{bench}" '
    #          10 us,  1 MB + 1 MB, 1000 B/cycle at 1 GHz, 1 GHz SM; 2e6 FADD + 1e6 FFMA; 1e9 tensor
    values = ["10", "1,000", "1,000", "1,000", "1", "1", "2,000,000", "1,000,000", "1,000", "1,000,000,000",
              "2,000,000", "80", "128"]
    rows = [["0", "42", "python", "h", cell, "", "gemm_kernel", *values],
            ["1", "42", "python", "h", cell, "", "gemm_kernel", *values],
            ["2", "42", "python", "h", '42  "<default domain>:warmup:none:none:none:none:none:none" ', "",
             "other_kernel", *values]]
    launches = parse_ncu_raw_csv(raw_csv(rows, ROOF_METRICS))
    assert [la.benchmark for la in launches] == [bench, bench, NO_RANGE]
    summaries = summarise(launches, ["sm__ops_path_tensor_src_bf16_dst_fp32"])
    mm = next(s for s in summaries if s.row.benchmark == bench)
    m = mm.row.metrics
    assert (mm.row.count, mm.row.time_ms) == (2, pytest.approx(0.02))
    assert m["flops"] == 2 * (1e9 + 2e6 + 2 * 1e6)
    assert m["dram_bytes"] == 2 * 2e6
    assert m["intensity_flop_per_byte"] == pytest.approx((1e9 + 4e6) / 2e6)
    # tensor: 1e9 FLOP in 10 us = 1e14 FLOP/s against a dense peak of 2e6 / 2 per cycle at 1 GHz = 1e15
    assert mm.precision == "tensor_src_bf16_dst_fp32" and m["pct_peak_flops"] == pytest.approx(10.0)
    assert m["pct_peak_bandwidth"] == pytest.approx(100 * 2e6 / 10e-6 / 1e12)  # 20 %
    assert m["dram_gbps"] == pytest.approx(200.0) and m["tflops"] == pytest.approx(100.4)
    assert m["sm_pct"] == pytest.approx(80.0) and m["registers"] == 128.0
    table = format_rows([s.row for s in summaries], metrics=["pct_peak_flops", "sm_pct"])
    assert f"== {bench}  (2 launches" in table and f"== {NO_RANGE}" in table


def test_tensor_counters_are_counted_once() -> None:
    h100 = ["sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32", "sm__ops_path_tensor_op_hmma_src_bf16_dst_fp32",
            "sm__ops_path_tensor_src_bf16_dst_fp32", "sm__ops_path_tensor_src_fp16", "sm__throughput"]
    assert tensor_metrics(h100) == ["sm__ops_path_tensor_src_bf16_dst_fp32", "sm__ops_path_tensor_src_fp16"]
    per_op = ["sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off",
              "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_on", "sm__ops_path_tensor_op_hmma_src_fp16",
              "sm__ops_path_tensor_op_hmma_src_fp16_sparsity_off"]
    assert tensor_metrics(per_op) == ["sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off",
                                      "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_on",
                                      "sm__ops_path_tensor_op_hmma_src_fp16"]


def fake_ncu(bin_dir: Path, log: Path, csv_text: Path | None) -> None:
    """--query-metrics lists a few metrics; a profile run writes the report (when given a CSV) and
    logs its arguments; --import prints the CSV."""
    touch = "" if csv_text is None else ': > "$stem.ncu-rep"'
    tool(bin_dir, "ncu", f"""case " $* " in
*" --query-metrics "*) printf 'Metric Name  Type  Unit  Description\\ngpu__time_duration  Counter  ns  d\\n' ;;
*" --import "*) cat "{csv_text}" ;;
*) echo "$@" > "{log}"
   prev=""; for a in "$@"; do [ "$prev" = --export ] && stem="$a"; prev="$a"; done
   {touch} ;;
esac
""")


def test_ncu_runner_command_filter_and_set(bin_dir: Path, tmp_path: Path, selection: list[str]) -> None:
    log = tmp_path / "ncu.args"
    fake_ncu(bin_dir, log, None)
    with pytest.raises(InfrastructureError, match="ncu profiled no kernel inside a perfci benchmark range") as err:
        NcuProfiler().run(selection, tmp_path / "out", {"set": "full"})
    assert err.value.exit_code == EXIT_INFRASTRUCTURE and NVTX_FILTER in str(err.value)
    args = log.read_text().split()
    assert args[:6] == ["--clock-control", "none", "--nvtx", "--nvtx-include", "regex:perfci@.*::.*/",
                        "--target-processes"]
    assert args[args.index("--set") + 1] == "full"
    assert args[args.index("--metrics") + 1] == "gpu__time_duration.sum"  # only what this ncu offers
    assert "--benchmark-disable" in args and selection[0] in args
    with pytest.raises(BadInputError, match="--set 'most'"):
        NcuProfiler("most")


def test_ncu_runner_end_to_end(bin_dir: Path, tmp_path: Path, selection: list[str]) -> None:
    fake_ncu(bin_dir, tmp_path / "ncu.args", DATA / "ncu_raw_h100.csv")
    run = NcuProfiler().run(selection, tmp_path / "out")
    assert [p.name for p in run.files] == ["perfci.ncu-rep", "ncu_raw.csv", "ncu_summary.json"]
    doc = json.loads(run.summary.read_text())
    gemm = doc["ranges"]["tests/data/nsight/bench_nsight.py::test_matmul_bf16"]
    assert gemm["kernel_count"] == 1 and gemm["kernels"][0]["category"] == "gemm"
    assert {r.benchmark for r in run.rows} == {"tests/data/nsight/bench_nsight.py::test_matmul_bf16",
                                               "tests/data/nsight/bench_nsight.py::test_copy_256mib"}
    assert "pct_peak_flops" in run.table()


def test_profile_nsys_from_an_export_through_the_cli(export: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from perfci.cli import main

    assert main(["profile", "--nsys", "--from", str(export), "-o", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "== " in out and "::" in out  # per benchmark range
    summary = json.loads((tmp_path / "out" / "nsys_summary.json").read_text())
    assert summary["ranges"] and all("kernel_count" in r for r in summary["ranges"].values())
    assert main(["profile", "--ncu", "--from", str(export)]) == 2  # --from reads nsys exports only
    assert main(["profile", "--torch", "--set", "full"]) == 2  # --set is Nsight Compute's


def test_a_kernel_that_left_the_compute_roof_or_the_tensor_pipe_is_noted() -> None:
    from perfci.ncu import bound_changes, parse_ncu_raw_csv, summarise, summary_json

    real = summary_json(summarise(parse_ncu_raw_csv((DATA / "ncu_raw_h100.csv").read_text())), DATA, [])
    bench = "tests/data/nsight/bench_nsight.py::test_matmul_bf16"
    gemm = real["ranges"][bench]["kernels"][0]
    assert gemm["metrics"]["pct_peak_flops"] > gemm["metrics"]["pct_peak_bandwidth"]  # the real GEMM: compute-bound
    assert bound_changes(real, real) == {}
    worse = json.loads(json.dumps(real))
    m = worse["ranges"][bench]["kernels"][0]["metrics"]
    m.update(pct_peak_flops=8.0, pct_peak_bandwidth=71.0, tensor_pct=0.5)
    notes = bound_changes(real, worse)[bench]
    assert any("compute-bound" in n and "memory-bound" in n for n in notes)
    if gemm["metrics"].get("tensor_pct", 0) >= 20:
        assert any("lost tensor-pipe use" in n for n in notes)


def test_perfci_profile_from_plain_pytest_profiles_what_the_session_measured(pytester: pytest.Pytester,
                                                                            bin_dir: Path) -> None:
    """--perfci-profile=ncu runs the measured benchmarks under the tool after the session (here a
    stand-in ncu that logs its command line and writes no report: the run says so in one line)."""
    log = bin_dir / "ncu.args"
    fake_ncu(bin_dir, log, None)
    pytester.makepyfile(test_p="""
        import torch

        def test_add(perf):
            perf(torch.add, torch.ones(8), torch.ones(8))
    """)
    res = pytester.runpytest_subprocess("--perfci-max-time=0.05", "--perfci-min-time=0.01", "--perfci-profile=ncu",
                                        "-p", "no:cacheprovider")
    res.assert_outcomes(passed=1)
    out = res.stdout.str()
    assert "--perfci-profile ncu: 1 benchmark(s)" in out
    assert "ncu profiled no kernel inside a perfci benchmark range" in out  # the stand-in wrote no report
    args = log.read_text()
    assert "test_p.py::test_add" in args and "--clock-control none" in args and "regex:perfci@" in args
