#!/usr/bin/env bash
# Session-8 device calls (issue 16, the warp-specialised Gluon attention backward): bash kernels/device_s8_bwd.sh CALL
# (OUT set by the tool).  Every step is guarded by `timeout`; a smoke run of the Gluon backward comes first, so a
# hang (an mbarrier deadlock) or a build failure stops the call after 60 s instead of eating every step's time.
# The steps' limits add up to 330 s (the call's limit is 360 s).
# call1: smoke; kernels.tune_bwd check --only triton,gluon (every case vs the fp32 reference); the GPU tests of
#        tests/kernels/test_attention_bwd_ws.py; the graph-timed bench (2-kernel Triton vs Gluon vs SDPA cuDNN, the
#        fused kernel and SDPA flash left out) with the Gluon ring-depth sweep and its no-dQ timing diagnostic.
#        (Run by the lead: the smoke passed d128 full/causal and d64 full, then ran out of its 60 s in the builds.)
# call2: the smoke with 120 s, the bench without the sweep, then the GPU tests.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
LOG=$OUT/kernels_h100_s8_bwd_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"
smoke() {
  timeout ${SMOKE_S:-60} python3 - <<'EOF' 2>&1 | tee "${LOG}_smoke.log"
import time, torch
from kernels import attention, attention_bwd_ws
from kernels.reference import rel_err
for d, causal in ((128, False), (128, True), (64, False), (64, True)):
    q, k, v, do = (torch.randn(1, 4, 1000, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    out, lse = attention.attention_forward(q, k, v, causal, impl="triton")
    t0 = time.time()
    g = attention.attention_backward(do, q, k, v, out, lse, causal, impl="gluon")
    torch.cuda.synchronize()
    r = attention.attention_backward(do, q, k, v, out, lse, causal, impl="triton")
    errs = " ".join(f"{n} {rel_err(a, b):.2e}" for n, a, b in zip(("dq", "dk", "dv"), g, r))
    print(f"smoke d{d} causal={causal}: gluon vs triton {errs} ({time.time() - t0:.1f} s with the build)", flush=True)
print("smoke status:", attention_bwd_ws.status())
EOF
}
case "$CALL" in
  call2)  # call 1's smoke passed d128 full/causal and d64 full, then ran out of its 60 s in the builds
    SMOKE_S=120 smoke || { echo "smoke failed rc=$?"; exit 1; }
    timeout 150 python3 -m kernels.tune_bwd bench --skip fused,sdpa-flash,"triton dkdv" 2>&1 | tee "${LOG}_bench.log"
    echo "bench rc=$?"
    timeout 110 python3 -m pytest tests/kernels/test_attention_bwd_ws.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -25 | tee "${LOG}_gpu_tests.log"
    echo "gpu tests rc=$?"
    ;;
  call1|call3)
    smoke || { echo "smoke failed rc=$?"; exit 1; }
    timeout 80 python3 -m kernels.tune_bwd check --only triton,gluon 2>&1 | tee "${LOG}_check.log"
    echo "check rc=$?"
    timeout 80 python3 -m pytest tests/kernels/test_attention_bwd_ws.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -25 | tee "${LOG}_gpu_tests.log"
    echo "gpu tests rc=$?"
    timeout 110 python3 -m kernels.tune_bwd bench --sweep --diag --skip fused,sdpa-flash,"triton dkdv" 2>&1 \
      | tee "${LOG}_bench.log"
    echo "bench rc=$?"
    ;;
esac
