"""kernels.ncu_compare on small exports written in ncu's CSV formats (the raw page: a header row from "ID", a
units row, a row per launch; the source page: per kernel a "Kernel Name" row, a header row from "Address", a row
per SASS instruction).  CPU only: ncu itself runs on the device machine."""

from __future__ import annotations

import re

import pytest

from kernels import ncu_compare

RAW = '''==PROF== Connected to process 1
"ID","Process ID","Kernel Name","gpu__time_duration.sum","smsp__inst_executed.sum",\
"smsp__pcsamp_warps_issue_stalled_wait","smsp__pcsamp_warps_issue_stalled_wait_not_issued"
"","","","msecond","inst","",""
"0","7","vectorized_elementwise_kernel","0.01","100","1","1"
"1","7","{kernel}","{ms}","{inst}","{wait}","3"
'''

SASS_HEADER = ('"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)",'
               '"Instructions Executed","L1 Wavefronts Shared","L1 Wavefronts Shared Excessive"')


def _sass(kernel: str, rows: list[tuple]) -> str:
    """(source, executed, stall samples[, shared wavefronts, excessive]) rows; "-" where no wavefront applies."""
    other = '"Kernel Name","vectorized_elementwise_kernel"\n' + SASS_HEADER + '\n"0x10","  EXIT ","1","1","9","-","-"\n'
    body = "\n".join(f'"0x{i:x}","      {r[0]} ","{r[2]}","0","{r[1]}","{r[3] if len(r) > 3 else "-"}",'
                     f'"{r[4] if len(r) > 4 else "-"}"' for i, r in enumerate(rows))
    return other + f'"Kernel Name","{kernel}"\n{SASS_HEADER}\n{body}\n'


@pytest.fixture
def exports(tmp_path):
    files = {}
    for side, kernel, ms, inst, wait, rows in (
        ("ours", "attn_fwd_ws", "0.337", "1000", "80",
         [("PRMT R120, R120, 0x5432, R120", 600, 15), ("@!P0 PRMT R121, R121, 0x5432, R121", 400, 5),
          ("HGMMA.64x128x16.F32.BF16 R24, gdesc[UR20], RZ, !UPT", 50, 7), ("FMNMX R1, R2, R3, !PT", 30, 2),
          ("STS.64 [R4+UR4+0x28000], R152", 16, 3, "1,024", "512")]),
        ("ref", "cudnn_generated_fort_native_sdpa_sm90_flash_fprop", "0.333", "900", "60",
         [("HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], R24", 50, 9), ("FMNMX.FTZ R1, R2, R3, !PT", 30, 4)]),
    ):
        raw, sass = tmp_path / f"{side}_raw.csv", tmp_path / f"{side}_sass.csv"
        raw.write_text(RAW.format(kernel=kernel, ms=ms, inst=inst, wait=wait))
        sass.write_text(_sass(kernel, rows))
        files[side] = (str(raw), str(sass))
    return files


def test_sides_side_by_side(exports, capsys):
    code = ncu_compare.main(["--ours", *exports["ours"], "attn_fwd", "--ref", *exports["ref"], "cudnn"])
    out = capsys.readouterr().out
    assert code == 0
    assert "ours: attn_fwd_ws" in out and "ref:  cudnn_generated_fort_native_sdpa_sm90_flash_fprop" in out
    lines = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.strip()}
    assert lines["gpu__time_duration.sum"] == ["0.000337", "0.000333"]  # msecond -> s, not the first launch's
    # a predicated PRMT counts under PRMT; HGMMA keeps its shape; FMNMX and FMNMX.FTZ are kept apart
    assert lines["PRMT"] == ["1000", "(", "20)", "0", "(", "0)"]
    assert lines["HGMMA.64x128x16.F32.BF16"] == ["50", "(", "7)", "50", "(", "9)"]
    assert lines["FMNMX"][0] == "30" and lines["FMNMX.FTZ"][3] == "30"
    assert lines["smsp__pcsamp_warps_issue_stalled_wait"] == ["80", "60"]
    assert "smsp__pcsamp_warps_issue_stalled_wait_not_issued" not in lines
    assert lines["total"] == ["1096", "80"]
    # in both tables: executed (stall samples), then shared wavefronts (excessive), the only row with any there
    sts = [line.split()[1:] for line in out.splitlines() if line.startswith("STS.64")]
    assert sts == [["16", "(", "3)", "0", "(", "0)"], ["1024", "(", "512)", "0", "(", "0)"]]
    assert out.splitlines()[-1].startswith("STS.64")
    assert [k for k in lines if k in ("PRMT", "HGMMA.64x128x16.F32.BF16")] == ["PRMT", "HGMMA.64x128x16.F32.BF16"]


def test_unknown_kernel_is_a_usage_error_naming_the_ones_there(exports, capsys):
    with pytest.raises(SystemExit) as exc:
        ncu_compare.main(["--ours", *exports["ours"], "attn", "--ref", *exports["ref"], "flash_bprop"])
    assert exc.value.code == 2
    assert re.search(r"no kernel matching 'flash_bprop'.*vectorized_elementwise_kernel", capsys.readouterr().err)


def test_missing_file_is_a_usage_error(exports, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        ncu_compare.main(["--ours", str(tmp_path / "none.csv"), exports["ours"][1], "attn",
                          "--ref", *exports["ref"], "cudnn"])
    assert exc.value.code == 2 and "no such file" in capsys.readouterr().err
