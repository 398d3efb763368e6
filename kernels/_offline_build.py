"""The shared part of the offline sm_90 build checks (``kernels/compile_check_ws.py``, ``compile_check_bwd_ws.py``,
``compile_check_mm.py``): build a Gluon kernel through Gluon's own source class (as the JIT does) against the
Triton 3.6.0 of ``TRITON_SITE``, run ptxas on its PTX, and print one report line per configuration.

A check script puts ``TRITON_SITE`` (default /tmp/t36/site311) and the repository first on ``sys.path`` before it
imports this module.
"""

import os
import subprocess
import sys
from collections.abc import Callable

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource

TARGET = GPUTarget("cuda", 90, 128)
GL_TYPES = {"bf16": gl.bfloat16, "fp16": gl.float16, "fp32": gl.float32, "fp8e4nv": gl.float8e4nv}
_BIN = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin")


def descriptor_type(dtype: str, box: tuple[int, ...]) -> str:
    """The signature type of a host tensor descriptor of ``box`` (its default NVMMA shared layout)."""
    layout = gl.NVMMASharedLayout.get_default_for(list(box), GL_TYPES[dtype])
    return f"tensordesc<{dtype}[{', '.join(map(str, box))}],{layout!r}>"


def build(fn, sig: dict, const: dict, attrs: dict, *, maxnreg: int, tag: str, path: str,
          counts: tuple[str, ...] = ("wgmma.mma_async",), report: tuple[str, ...] = ("spill", "rror"),
          keep_sass: bool = False, sass_check: Callable[[str], list[str]] | None = None) -> bool:
    """Build ``fn`` (4 warps) and print ``OK tag: shared memory, the PTX counts of ``counts``, the SASS instruction
    count | ptxas's lines holding a word of ``report```` or ``FAIL tag: the innermost error`` (VERBOSE=1: its
    tail too).  ``path`` (no suffix) gets the .ptx and .cubin (and .sass with ``keep_sass``).  ``sass_check`` takes
    the SASS and returns its findings, printed after the report line; any finding fails the build.  True if it built
    (with no finding)."""
    try:
        kernel = triton.compile(GluonASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs), target=TARGET,
                                options={"num_warps": 4, "num_stages": 1, "maxnreg": maxnreg})
    except Exception as exc:  # report the innermost cause and go on with the next configuration
        while exc.__cause__ is not None or exc.__context__ is not None:
            exc = exc.__cause__ or exc.__context__
        lines = [line for line in str(exc).splitlines() if line.strip()]
        print(f"FAIL {tag}: {type(exc).__name__}: {lines[-1] if lines else ''}", flush=True)
        if os.environ.get("VERBOSE"):
            print(str(exc)[-4000:])
        return False
    ptx = kernel.asm["ptx"]
    with open(path + ".ptx", "w") as f:
        f.write(ptx)
    run = subprocess.run([os.path.join(_BIN, "ptxas"), "-arch=sm_90a", "-v", path + ".ptx", "-o", path + ".cubin"],
                         capture_output=True, text=True)
    notes = " ".join(line.strip() for line in run.stderr.splitlines() if any(w in line for w in report))
    sass = subprocess.run([os.path.join(_BIN, "cuobjdump"), "-sass", path + ".cubin"], capture_output=True,
                          text=True).stdout
    if keep_sass:
        with open(path + ".sass", "w") as f:
            f.write(sass)
    n_sass = sum(1 for line in sass.splitlines() if line.strip().startswith("/*") and "*/" in line.strip()[:12])
    found = {w: ptx.count(w) for w in counts}
    print(f"OK {tag}: shared={kernel.metadata.shared} B, {found}, {n_sass} SASS instructions | {notes}", flush=True)
    if sass_check is None:
        return True
    findings = sass_check(sass)
    print(f"   SASS check: {'; '.join(findings) or 'nothing found'}", flush=True)
    return not findings


PTX_FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "data", "ptx")


def write_ptx_fixture(ptx: str, name: str) -> None:
    """Write ``ptx`` gzipped as the tests/data/ptx fixture ``name``: without the debug line records and sections
    (paths of the machine that built it)."""
    import gzip

    lines = [line for line in ptx.splitlines() if not line.lstrip().startswith((".loc", ".file"))]
    end = next((i for i, line in enumerate(lines) if line.startswith("\t.section\t.debug")), len(lines))
    path = os.path.join(PTX_FIXTURES, name)
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines[:end]) + "\n")
    print(f"wrote {path}")


def build_ptx_fixture(check: Callable[..., bool], name: str, **kwargs) -> None:
    """Build ``check(**kwargs)`` (a check script's build of one configuration) and write its PTX, as Triton emitted
    it (before any rewrite), as the tests/data/ptx fixture ``name``."""
    check(**kwargs, path="/tmp/ptx_fixture")
    with open("/tmp/ptx_fixture.ptx") as f:
        write_ptx_fixture(f.read(), name)


def main(check, argv: list[str]) -> int:
    """Build each argument's configuration (``"key=value, ..."``: keyword arguments of ``check``; none: the
    defaults); exit status 1 if any failed."""
    if triton.__version__ != "3.6.0":
        print(f"warning: Triton {triton.__version__} imported, not the GPU machine's 3.6.0", file=sys.stderr)
    # each argument is the developer's own "key=value, ..." text: evaluated as dict(...) keyword arguments
    ok = [check(**eval(f"dict({spec})")) for spec in (argv or [""])]
    return 0 if all(ok) else 1
