"""Stand-ins for Triton 3.6's compile path, for the CPU tests of the PTX rewrites (kernels/_ptx_stage.py and its
users): the PTX stage through the stage-inspection hook, and a JIT function's compile step that goes through it."""

from __future__ import annotations


def compile_ptx(runtime, ptx: str) -> str:
    """What Triton's compile does with the hook: call it on the stages, then run the PTX stage (which emits ``ptx``)."""
    stages = {"ptx": lambda src, metadata: ptx, "cubin": None}
    if runtime.add_stages_inspection_hook is not None:
        runtime.add_stages_inspection_hook(None, stages, None, None, 90)
    return stages["ptx"](None, {})


class Compiled:
    """A compiled kernel: its PTX and Triton 3.6's (warps, CTAs, shared memory) launch metadata."""

    def __init__(self, ptx: str):
        self.asm = {"ptx": ptx}
        self.packed_metadata = (4, 1, 213168)


class StandInJit:
    """The JIT function's compile step as Triton 3.6 calls it (runtime/jit.py): the PTX stage through the
    stage-inspection hook, as triton.compile does; ``calls`` records the constexprs of each compile."""

    def __init__(self, ptx: str, arg_names: tuple[str, ...]):
        self.ptx, self.arg_names, self.calls = ptx, arg_names, []

    def _do_compile(self, key, signature, device, constexprs, options, attrs, warmup):
        from triton import knobs

        self.calls.append(constexprs)
        return Compiled(compile_ptx(knobs.runtime, self.ptx))
