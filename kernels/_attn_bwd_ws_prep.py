"""The Gluon backward's in-kernel preparation (``kernels/_attn_bwd_ws.py``, ``PREP``): the pre-pass's work (delta =
rowsum(o dO), the fp32 dQ scratch zeroed) for a later kv head, done by each program's loader warpgroup, counted on
that head's flag, and the wait for a program's own head."""
# (no "from __future__ import annotations": the aggregate below needs its field types at run time)

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.language.core import _aggregate as aggregate

VEC: gl.constexpr = gl.constexpr(gl.BlockedLayout([1], [32], [4], [0]))  # one value a thread (the backward's too)


@aggregate
class Prep:
    """The pre-pass's work for a later kv head, done by this program's loader (``PREP``): delta of its slice of
    that head's query rows and the dQ scratch rows zeroed, counted on the head's flag; each program of a head past
    the first ``ahead`` waits in its prologue for its own head's count."""
    OUT: gl.tensor
    DO: gl.tensor
    DELTA: gl.tensor
    DQACC: gl.tensor
    SYNC: gl.tensor  # int32: [0] the programs' ticket, [1 + kv head] that head's count
    sob: gl.tensor
    soh: gl.tensor
    sol: gl.tensor
    sdb: gl.tensor
    sdh: gl.tensor
    sdl: gl.tensor
    ahead: gl.tensor  # kv heads between a program's and the one it prepares (the pre-pass prepares the first ones)
    n_kb: gl.tensor
    kb: gl.tensor
    PREP: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, OUT, DO, DELTA, DQACC, SYNC, sob, soh, sol, sdb, sdh, sdl, ahead, n_kb, kb, PREP):
        self.OUT, self.DO, self.DELTA, self.DQACC, self.SYNC = OUT, DO, DELTA, DQACC, SYNC
        self.sob, self.soh, self.sol, self.sdb, self.sdh, self.sdl = sob, soh, sol, sdb, sdh, sdl
        self.ahead, self.n_kb, self.kb = ahead, n_kb, kb
        self.PREP = gl.constexpr(PREP)


@gluon.jit
def _prep_target(pr: Prep, pb):
    """(the kv head this program prepares, ``ahead`` after its own; whether there is one: below the kv head count)."""
    tgt = pb.b * pb.HKV + pb.hk + pr.ahead
    return tgt, tgt < gl.num_programs(0) // pr.n_kb


@gluon.jit
def _prep_slice(pr: Prep, pb, R: gl.constexpr):
    """(kv head prepared by this program, or -1 past the last, its first query row, the slice's end, row chunks a
    query head): the slice is this key block's share of the head's rows."""
    tgt, valid = _prep_target(pr, pb)
    per = gl.cdiv(gl.cdiv(pb.LQ, pr.n_kb), R) * R
    r_lo = pr.kb * per
    r_hi = gl.minimum(r_lo + per, pb.LQ)
    n_r = gl.cdiv(gl.maximum(r_hi - r_lo, 0), R)
    return gl.where(valid, tgt, -1), r_lo, r_hi, n_r


@gluon.jit
def _prep_chunk(pr: Prep, pb, c, HEAD_DIM: gl.constexpr):
    """Chunk ``c`` of this program's preparation (``R`` rows of one query head of the prepared kv head): delta =
    rowsum(o dO) and the dQ scratch rows zeroed."""
    TPR: gl.constexpr = HEAD_DIM // 8  # threads a row, 8 columns each
    R: gl.constexpr = 128 // TPR  # rows a chunk: one pass of the 4 warps
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TPR, TPR], [4, 1], [1, 0])
    tgt, r_lo, r_hi, n_r = _prep_slice(pr, pb, R)
    g = c // n_r
    r0 = r_lo + (c % n_r) * R
    tb = tgt // pb.HKV
    h = (tgt % pb.HKV * pb.GROUP + g).to(gl.int64)
    qh = tgt.to(gl.int64) * pb.GROUP + g
    cols = gl.expand_dims(gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, layout)), 0)
    rows = r0 + gl.arange(0, R, layout=gl.SliceLayout(1, layout))
    ok = rows < r_hi
    rows64 = gl.expand_dims(rows.to(gl.int64), 1)
    ok2 = gl.expand_dims(ok, 1) & (cols < HEAD_DIM)
    o = gl.load(pr.OUT + tb.to(gl.int64) * pr.sob + h * pr.soh + rows64 * pr.sol + cols, mask=ok2, other=0.0)
    do = gl.load(pr.DO + tb.to(gl.int64) * pr.sdb + h * pr.sdh + rows64 * pr.sdl + cols, mask=ok2, other=0.0)
    gl.store(pr.DELTA + qh * pb.LQ + rows, gl.sum(o.to(gl.float32) * do.to(gl.float32), 1), mask=ok)
    gl.store(pr.DQACC + (qh * pb.LQ + rows64) * HEAD_DIM + cols, gl.zeros([R, HEAD_DIM], gl.float32, layout),
             mask=ok2)


@gluon.jit
def _prep_chunks(pr: Prep, pb, HEAD_DIM: gl.constexpr):
    """How many chunks this program's preparation takes (0 past the last kv head)."""
    R: gl.constexpr = 128 // (HEAD_DIM // 8)
    tgt, _, _, n_r = _prep_slice(pr, pb, R)
    return gl.where(tgt >= 0, n_r * pb.GROUP, 0)


@gluon.jit
def _prep_release(pr: Prep, pb):
    """Each loader thread's release-add on the prepared head's count (its stores before it): n_kb x 128 in all."""
    tgt, valid = _prep_target(pr, pb)
    if valid:
        one = gl.full([128], 1, gl.int32, VEC)
        gl.atomic_add(pr.SYNC + 1 + tgt + one * 0, one, sem="release", scope="gpu")


@gluon.jit
def _wait_prepared(pr: Prep, pb):
    """The wait for this program's kv head's delta and zeroed dQ rows (past the pre-pass's heads); each consumer then
    fences (:func:`_proxy_fence`)."""
    bhk = pb.b * pb.HKV + pb.hk
    if bhk >= pr.ahead:
        target = pr.n_kb * 128
        seen = gl.atomic_add(pr.SYNC + 1 + bhk, 0, sem="acquire", scope="gpu")
        while seen < target:
            seen = gl.atomic_add(pr.SYNC + 1 + bhk, 0, sem="acquire", scope="gpu")


@gluon.jit
def _proxy_fence():
    """``fence.proxy.async.global``: this thread's TMA (async proxy) accesses after its generic ones and after what
    they have seen (the zeroed dQ rows that another program's stores released)."""
    z = gl.full([64], 0, gl.int32, VEC)
    gl.inline_asm_elementwise("fence.proxy.async.global; mov.b32 $0, $1;", "=r,r", [z], dtype=gl.int32,
                              is_pure=False, pack=1)
