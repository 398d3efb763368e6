"""Does AOTInductor load and run on this machine? Each case compiles a module, then loads and calls
the package in a fresh child process (a loader crash is reported as a signal, not a lost session).

    python3 scripts/aoti_probe.py [WORK_DIR]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import torch

CHILD = """
import sys, torch
model = torch._inductor.aoti_load_package(sys.argv[1])
dev = sys.argv[2]
args = [torch.randn(2, 4, 16, 8, device=dev)] * (1 if sys.argv[3] == "add" else 3)
if sys.argv[3] == "sdpa":
    args = [a.half() for a in args] if dev == "cuda" else args
print("loaded; output", tuple(model(*args).shape))
"""


class Add(torch.nn.Module):
    def forward(self, x):
        return x + 1


class Sdpa(torch.nn.Module):
    def forward(self, q, k, v):
        import torch.nn.functional as F

        return F.scaled_dot_product_attention(q, k, v)


def main() -> int:
    work = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp())
    work.mkdir(parents=True, exist_ok=True)
    print("torch", torch.__version__, "cuda", torch.version.cuda, flush=True)
    for dev in ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",):
        for name, module in (("add", Add()), ("sdpa", Sdpa())):
            n = 1 if name == "add" else 3
            dtype = torch.float16 if (dev == "cuda" and name == "sdpa") else torch.float32
            args = tuple(torch.randn(2, 4, 16, 8, device=dev, dtype=dtype) for _ in range(n))
            try:
                path = torch._inductor.aoti_compile_and_package(torch.export.export(module, args),
                                                                package_path=str(work / f"{name}_{dev}.pt2"))
            except Exception as exc:
                print(f"{dev} {name}: compile failed: {type(exc).__name__}: {exc}", flush=True)
                continue
            child = subprocess.run([sys.executable, "-X", "faulthandler", "-c", CHILD, path, dev, name],
                                   capture_output=True, text=True)
            how = "ok" if child.returncode == 0 else (f"signal {-child.returncode}" if child.returncode < 0
                                                        else f"exit {child.returncode}")
            print(f"{dev} {name}: load+call {how}: {child.stdout.strip()}", flush=True)
            if child.returncode:
                print("\n".join(child.stderr.strip().splitlines()[-12:]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
