"""Measure what ``perfci.trace.profile_call`` costs per benchmark, on the seeded test cases.

    python scripts/profile_overhead.py                 # CPU cases from tests/test_trace.py
    python scripts/profile_overhead.py --gpu           # GPU cases from tests/test_trace_gpu.py
    python scripts/profile_overhead.py --dump out.json # also save the profiles (to_dict) as JSON

Run from the repository root (culprit paths are relative to the working directory).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfci.trace import format_profile_table, profile_call


def _cases(gpu: bool):
    if gpu:
        import tests.test_trace_gpu as mod

        tensors = mod.make_tensors()
        return {fn.__name__: (lambda fn=fn: fn(tensors)) for fn in mod.CASES}
    import tests.test_trace as mod

    names = ["sdpa_transpose_copies", "sdpa_strided_views", "sdpa_with_mask", "sdpa_broadcast_kv",
             "sdpa_forced_math", "nan_check_sync", "item_sync", "upcast_matmul", "bf16_matmul", "unfused_chain",
             "fused_one_op", "launches_nothing"]
    return {name: getattr(mod, name) for name in names}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu", action="store_true", help="profile the GPU cases (needs CUDA)")
    parser.add_argument("--dump", type=Path, help="write the profiles' to_dict() here as JSON")
    parser.add_argument("--table", action="store_true", help="print each profile's table")
    args = parser.parse_args(argv)
    cases = _cases(args.gpu)
    profiles, seconds = {}, {}
    for name, fn in cases.items():
        started = time.perf_counter()
        profiles[name] = profile_call(fn, label=name)
        seconds[name] = time.perf_counter() - started
        print(f"{name:<24} {seconds[name] * 1e3:8.1f} ms  status={profiles[name].status} "
              f"sdpa={profiles[name].sdpa_backend} copies={sum(c.count_per_call for c in profiles[name].copies()):g} "
              f"syncs={profiles[name].syncs_per_call():g} launches={profiles[name].launches_per_call:g}")
        if args.table:
            print(format_profile_table(profiles[name]))
    warm = list(seconds.values())[1:] or list(seconds.values())
    print(f"mean {sum(seconds.values()) / len(seconds) * 1e3:.1f} ms per benchmark "
          f"(first call includes profiler start-up: {next(iter(seconds.values())) * 1e3:.1f} ms; "
          f"mean of the rest {sum(warm) / len(warm) * 1e3:.1f} ms)")
    if args.dump:
        args.dump.parent.mkdir(parents=True, exist_ok=True)
        args.dump.write_text(json.dumps({n: p.to_dict() for n, p in profiles.items()}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
