"""Rule tables for the profile stage: what a kernel or an aten op *is*.

Everything here is data plus tiny lookups, so that the analysers in :mod:`perfci.trace` stay
table-driven; the last section says what a source file is for culprits (project, library,
skipped). Kernel names are matched by ordered ``(pattern, category, kind)`` rules, first hit
wins; aten ops are looked up by exact name.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import sysconfig
from dataclasses import dataclass

# --- categories -------------------------------------------------------------------------------

CATEGORIES = (
    "gemm",
    "attention",
    "copy",
    "memset",
    "memcpy",
    "reduction",
    "elementwise",
    "triton",
    "other",
)
SDPA_BACKENDS = ("flash", "efficient", "cudnn", "math", "unknown")


@dataclass(frozen=True)
class KernelRule:
    pattern: re.Pattern[str]
    category: str
    kind: str = ""


def _rule(pattern: str, category: str, kind: str = "") -> KernelRule:
    return KernelRule(re.compile(pattern), category, kind)


# Device-side activity names (CUDA kernels, memcpy, memset). Ordered: first match wins.
# ``kind`` is "" where it is filled in from the launching op (gemm dtype, copy kind).
KERNEL_RULES: tuple[KernelRule, ...] = (
    _rule(r"^Memcpy HtoD", "memcpy", "h2d"),
    _rule(r"^Memcpy DtoH", "memcpy", "d2h"),
    _rule(r"^Memcpy DtoD", "memcpy", "d2d"),
    _rule(r"^Memcpy PtoP", "memcpy", "p2p"),
    _rule(r"^Memcpy", "memcpy", "d2d"),
    _rule(r"^Memset", "memset"),
    # attention backends (before gemm: they contain "cutlass"/"gemm"-like words)
    _rule(r"flash_fwd|flash_bwd|pytorch_flash::|flash::", "attention", "flash"),
    _rule(r"fmha_cutlass|PyTorchMemEffAttention|efficient_attention", "attention", "efficient"),
    _rule(r"cudnn.*(sdpa|fmha|flash|attention)", "attention", "cudnn"),
    _rule(r"fmha|attention", "attention", "unknown"),
    # GEMMs: cuBLAS / cuBLASLt / CUTLASS
    _rule(r"gemm|nvjet|xmma|cublas|cutlass|splitKreduce|Kernel2|matmul", "gemm"),
    # copies recognisable by name alone
    _rule(r"direct_copy_kernel|copy_kernel|CatArrayBatchedCopy", "copy"),
    # compiled / user Triton kernels (inductor names them triton_<kind>_fused_...)
    _rule(r"^triton_", "triton"),
    _rule(r"reduce_kernel|softmax|layer_norm|LayerNorm|norm_kernel|DeviceReduce|DeviceScan|argmax|cumsum|"
          r"RowwiseMoments|welford", "reduction"),
    _rule(r"elementwise_kernel|FillFunctor|index_elementwise|CUDAFunctor", "elementwise"),
)

# Device-side activities that are markers, not work.
DEVICE_MARKER = re.compile(r"^(Context Sync|Stream Sync|Event Sync|Stream Wait Event|Event Record)")

# --- CPU side: the CUDA runtime / driver API -------------------------------------------------

RUNTIME_NAME = re.compile(r"^cu(da)?[A-Z]")
# Runtime calls that block the host until the device has caught up.
SYNC_RUNTIME: dict[str, str] = {
    "cudaDeviceSynchronize": "device_synchronize",
    "cudaStreamSynchronize": "stream_synchronize",
    "cudaEventSynchronize": "event_synchronize",
    "cudaMemcpy": "memcpy",
    "cudaMemcpy2D": "memcpy",
    "cuCtxSynchronize": "device_synchronize",
    "cuStreamSynchronize": "stream_synchronize",
}
# Launches made through the driver API with no aten op around them are user Triton kernels.
DRIVER_LAUNCH = re.compile(r"^cuLaunchKernel")
ANY_LAUNCH = re.compile(r"^cu(da)?LaunchKernel")

# --- aten ops --------------------------------------------------------------------------------

# role: what an op is for the op-level analysis.
#   "copy"      : part of a copy chain (the top-most one of a chain is the record)
#   "view"      : metadata only, never a kernel
#   "composite" : dispatches to other ops; transparent (its children are the records)
#   "sync"      : forces a device->host synchronisation on a GPU
#   "work"      : does work; the top-most work op is the record (absorbs its children)
COPY_OPS = frozenset(
    {"aten::copy_", "aten::contiguous", "aten::clone", "aten::_to_copy", "aten::to", "aten::_copy_from",
     "aten::_copy_from_and_resize"}
)
VIEW_OPS = frozenset(
    {
        "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::as_strided", "aten::as_strided_",
        "aten::view", "aten::_unsafe_view", "aten::_reshape_alias", "aten::transpose", "aten::t",
        "aten::permute", "aten::expand", "aten::expand_as", "aten::select", "aten::slice",
        "aten::unsqueeze", "aten::squeeze", "aten::detach", "aten::alias", "aten::lift_fresh",
        "aten::resolve_conj", "aten::resolve_neg", "aten::set_", "aten::resize_", "aten::unbind",
        "aten::split", "aten::chunk", "aten::narrow", "aten::numpy_T", "aten::view_as", "aten::unflatten",
        "aten::is_nonzero", "aten::item", "aten::size", "aten::stride", "aten::result_type",
        "aten::_has_compatible_shallow_copy_type", "aten::is_same_size", "aten::dim",
        "aten::scalar_tensor", "aten::_local_scalar_dense_cpu", "aten::record_stream", "aten::lift",
        "aten::_unsafe_split", "aten::diagonal", "aten::mT", "aten::movedim", "aten::swapaxes",
        "TorchDynamo Cache Lookup",
    }
)
COMPOSITE_OPS = frozenset(
    {
        "aten::scaled_dot_product_attention", "aten::_scaled_dot_product_attention_math",
        "aten::_scaled_dot_product_attention_math_for_mps", "aten::matmul", "aten::linear",
        "aten::einsum", "aten::tensordot", "aten::reshape", "aten::flatten", "aten::_safe_softmax",
        "aten::dropout", "aten::feature_dropout",
    }
)
# Ops that force a device->host sync on a GPU. ``_local_scalar_dense`` (``.item()``, ``bool(t)``) does no
# other work; ``nonzero`` also computes, so it is a "work" op as well.
SCALAR_SYNC = "aten::_local_scalar_dense"
SYNC_OPS: dict[str, str] = {SCALAR_SYNC: "item", "aten::nonzero": "nonzero"}

GEMM_OPS = frozenset(
    {"aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::addbmm", "aten::mv", "aten::addmv",
     "aten::dot", "aten::vdot", "aten::_scaled_mm", "aten::_int_mm", "aten::addmm_", "aten::_addmm_activation"}
)
REDUCTION_OPS = frozenset(
    {
        "aten::sum", "aten::mean", "aten::any", "aten::all", "aten::amax", "aten::amin", "aten::max",
        "aten::min", "aten::prod", "aten::norm", "aten::linalg_vector_norm", "aten::var", "aten::std",
        "aten::var_mean", "aten::std_mean", "aten::argmax", "aten::argmin", "aten::cumsum", "aten::cumprod",
        "aten::logsumexp", "aten::_softmax", "aten::_log_softmax", "aten::native_layer_norm",
        "aten::native_group_norm", "aten::native_batch_norm", "aten::_native_batch_norm_legit",
        "aten::_native_batch_norm_legit_no_training", "aten::topk", "aten::sort", "aten::count_nonzero",
        "aten::_fused_rms_norm", "aten::rms_norm", "aten::softmax", "aten::log_softmax", "aten::layer_norm",
        "aten::group_norm", "aten::batch_norm",
    }
)
MEMSET_OPS = frozenset({"aten::zero_", "aten::zeros", "aten::zeros_like"})

# The SDPA backend ops, CPU and GPU.
SDPA_OPS: dict[str, str] = {
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash",
    "aten::_flash_attention_forward": "flash",
    "aten::_scaled_dot_product_efficient_attention": "efficient",
    "aten::_efficient_attention_forward": "efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
    "aten::_cudnn_attention_forward": "cudnn",
    "aten::_scaled_dot_product_attention_math": "math",
    "aten::_scaled_dot_product_attention_math_for_mps": "math",
    "aten::_scaled_dot_product_fused_attention_overrideable": "unknown",
}
SDPA_ENTRY = "aten::scaled_dot_product_attention"
CPU_FLASH = "aten::_scaled_dot_product_flash_attention_for_cpu"

# dtype strings as torch.profiler records them -> (bytes per element, short label)
DTYPES: dict[str, tuple[int, str]] = {
    "float": (4, "fp32"),
    "double": (8, "fp64"),
    "c10::Half": (2, "fp16"),
    "c10::BFloat16": (2, "bf16"),
    "long int": (8, "int64"),
    "int": (4, "int32"),
    "short int": (2, "int16"),
    "signed char": (1, "int8"),
    "unsigned char": (1, "uint8"),
    "bool": (1, "bool"),
    "c10::complex<float>": (8, "complex64"),
    "c10::complex<double>": (16, "complex128"),
    "c10::complex<c10::Half>": (4, "complex32"),
}


# Op names whose suffix changes between runs (recompiles) without a change in structure.
_NAME_NOISE = re.compile(r"^(Torch-Compiled Region|CompiledFunction)\b.*$")


def stable_op_name(name: str) -> str:
    return _NAME_NOISE.sub(r"\1", name)


def dtype_size(dtype: str) -> int:
    """Bytes per element of a profiler dtype string (0 when unknown)."""
    known = DTYPES.get(dtype)
    if known is not None:
        return known[0]
    return 1 if "Float8" in dtype else 0


def dtype_label(dtype: str) -> str:
    known = DTYPES.get(dtype)
    if known is not None:
        return known[1]
    return "fp8" if "Float8" in dtype else dtype


_NAME_LIMIT = 160
_TEMPLATE_WRAPPERS = frozenset({"AUnaryFunctor", "BUnaryFunctor", "BinaryFunctor", "func_wrapper_t", "ReduceOp",
                                "gpu_kernel_impl", "gpu_kernel_impl_nocast", "OffsetCalculator"})
_FUNCTOR = re.compile(r"\b(\w+_kernel_cuda|\w+_kernel_impl|\w*Functor\w*|\w+_functor|launch_\w+|\w+_kernel)\b")


def display_kernel_name(name: str) -> str:
    """A short, stable name for a device kernel: ATen templates become ``outer<functor>``.

    ``void at::native::elementwise_kernel<128, 4, ...direct_copy_kernel_cuda(...)...>(...)`` ->
    ``elementwise_kernel<direct_copy_kernel_cuda>``; names without templates keep their text.
    """
    short = name.removeprefix("void ").replace("(anonymous namespace)::", "").replace("at::native::", "")
    if "<" not in short:
        short = re.sub(r"(?<=\w)\(.*\)$", "", short)  # drop a parameter list, keep "Memcpy DtoH (...)"
        return short if len(short) <= _NAME_LIMIT else short[: _NAME_LIMIT - 1] + "…"
    head, args = short.split("<", 1)
    base = head.split("::")[-1]
    functor = next((m for m in _FUNCTOR.findall(args) if m not in _TEMPLATE_WRAPPERS and m != base), None)
    return f"{base}<{functor}>" if functor else base


def classify_kernel(name: str) -> tuple[str, str]:
    """``(category, kind)`` of a device activity from its name alone; ``("other", "")`` if no rule hits."""
    for rule in KERNEL_RULES:
        if rule.pattern.search(name):
            return rule.category, rule.kind
    return "other", ""


ELEMENTWISE_OPS = frozenset(
    {
        "aten::add", "aten::sub", "aten::mul", "aten::div", "aten::add_", "aten::sub_", "aten::mul_",
        "aten::div_", "aten::neg", "aten::abs", "aten::exp", "aten::log", "aten::sqrt", "aten::rsqrt",
        "aten::pow", "aten::sigmoid", "aten::tanh", "aten::clamp", "aten::clamp_min", "aten::clamp_max",
        "aten::maximum", "aten::minimum", "aten::ne", "aten::eq", "aten::gt", "aten::lt", "aten::ge",
        "aten::le", "aten::isnan", "aten::isinf", "aten::isneginf", "aten::logical_not", "aten::logical_and",
        "aten::logical_or", "aten::fill_", "aten::masked_fill", "aten::masked_fill_", "aten::addcmul",
        "aten::addcdiv", "aten::lerp", "aten::gelu", "aten::silu", "aten::relu", "aten::relu_",
        "aten::threshold", "aten::erf", "aten::sin", "aten::cos", "aten::reciprocal", "aten::sign",
        "aten::bitwise_and", "aten::bitwise_or", "aten::bitwise_not", "aten::ones", "aten::ones_like",
        "aten::full", "aten::full_like", "aten::arange", "aten::normal_", "aten::uniform_", "aten::randn",
        "aten::rand", "aten::tril", "aten::triu", "aten::mul_out", "aten::add_out", "aten::where",
    }
)


def op_role(name: str) -> str:
    """``copy``, ``view``, ``composite``, ``sync`` or ``work`` for an op name.

    Unknown ops (``ns::op``) do work; other CPU events without a namespace (profiler bookkeeping,
    step markers) are ignored unless they stand for a compiled region.
    """
    if "::" not in name:
        return "work" if _NAME_NOISE.match(name) else "view"
    if name in COPY_OPS:
        return "copy"
    if name in VIEW_OPS:
        return "view"
    if name == SCALAR_SYNC:
        return "sync"
    if name in COMPOSITE_OPS:
        return "composite"
    return "work"


def op_category(name: str) -> tuple[str, str]:
    """``(category, kind)`` of a work op at op level (no kernels seen)."""
    if name in SDPA_OPS:
        return "attention", SDPA_OPS[name]
    if name in GEMM_OPS:
        return "gemm", ""
    if name in REDUCTION_OPS:
        return "reduction", ""
    if name in MEMSET_OPS:
        return "memset", ""
    if name in ELEMENTWISE_OPS:
        return "elementwise", ""
    return "other", ""


# --- source files: project, library or skipped (culprit frames) ------------------------------------------------------
# A frame is *skipped* (torch, perfci, pytest, the standard library, generated code), library code
# (*installed* in site-packages / dist-packages, e.g. transformers, or *outside* the working
# directory, e.g. a package on sys.path elsewhere), or *project* code (the tests and the code under
# test, below the working directory). The culprit is the deepest project frame; the library frames
# below it are its stack.

SKIP, INSTALLED, OUTSIDE, PROJECT = "skip", "installed", "outside", "project"
SKIP_PACKAGES = frozenset(
    {"torch", "perfci", "pytest", "_pytest", "pluggy", "triton", "functorch", "typing_extensions",
     "pytest_benchmark", "xdist", "execnet"}
)
_PACKAGE_DIRS = ("site-packages", "dist-packages")


def _skip_roots() -> tuple[str, ...]:
    roots = {os.path.dirname(os.path.abspath(__file__))}
    paths = sysconfig.get_paths()
    for key in ("stdlib", "platstdlib"):
        with contextlib.suppress(KeyError):
            roots.add(os.path.abspath(paths[key]))
    for module in ("torch", "pytest", "_pytest", "pluggy", "triton"):
        mod = sys.modules.get(module)
        if mod is not None and getattr(mod, "__file__", None):
            roots.add(os.path.dirname(os.path.abspath(mod.__file__)))
    return tuple(sorted(roots))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


_KIND_CACHE: dict[tuple[str, str], str] = {}


def file_kind(filename: str) -> str:
    """``skip``, ``installed``, ``outside`` or ``project`` for a source file (cached per file and working directory)."""
    cwd = os.getcwd()
    key = (filename, cwd)
    kind = _KIND_CACHE.get(key)
    if kind is None:
        path = os.path.abspath(filename)
        parts = path.split(os.sep)
        if filename.startswith("<"):
            kind = SKIP
        elif any(p in _PACKAGE_DIRS for p in parts):
            # site-packages may lie below the stdlib folder (/usr/local/lib/python3.X/site-packages)
            root = next(i for i, p in enumerate(parts) if p in _PACKAGE_DIRS)
            top = parts[root + 1] if root + 1 < len(parts) else ""
            kind = SKIP if top.split(".", 1)[0] in SKIP_PACKAGES else INSTALLED
        elif any(_under(path, root) for root in _skip_roots()):
            kind = SKIP
        else:
            kind = PROJECT if _under(path, cwd) else OUTSIDE
        _KIND_CACHE[key] = kind
    return kind


def display_path(filename: str) -> str:
    """Installed files relative to their site-packages (the same on every machine), project files to
    the working directory, others absolute."""
    path = os.path.abspath(filename)
    parts = path.split(os.sep)
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] in _PACKAGE_DIRS:
            return "/".join(parts[i + 1:])
    with contextlib.suppress(ValueError):
        rel = os.path.relpath(path)
        if not rel.startswith(".."):
            return rel
    return path
