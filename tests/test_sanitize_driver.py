"""The sanitizer driver (scripts/sanitize.sh runs it under compute-sanitizer on the GPU): its
cases reach every row plan kind, and the row-operator cases pass under the interpreter."""

from __future__ import annotations

from warpgauge.tools import sanitize_driver


def test_cases_reach_every_row_plan_kind(capsys):
    assert sanitize_driver.main(["--size", "tiny", "--list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    base = {"resident", "looped", "split", "coop", "coop_sub"}
    extra = {"softmax": {"coop_fast", "coop_sub_fast", "persistent_fast"}}
    for op in ("softmax", "add_rms_norm", "row_sum"):
        kinds = {
            ln.rsplit("plan=", 1)[1] for ln in listed if ln.startswith(op + ":") and "plan=" in ln
        }
        assert kinds == base | extra.get(op, set()), (op, kinds)
    # session 9's forced-only plans and the INT4 tile kernel's in-kernel split-K
    assert any(ln.startswith("row_sum:") and "persistent tiles" in ln for ln in listed)
    assert any(ln.startswith("add_rms_norm:") and "w_early" in ln for ln in listed)
    assert any("kernel='tile'" in ln and "fused=True" in ln and "tma=True" in ln for ln in listed)
    assert {ln.split(":")[0] for ln in listed} >= {"gemm", "int4_linear", "add"}
    # the pipelined INT4 GEMVs (the batch-1 default) are forced too
    assert any(ln.startswith("int4_linear:") and "pipeline=3" in ln for ln in listed)


def test_row_cases_pass_on_the_interpreter(capsys):
    assert (
        sanitize_driver.main(["--size", "tiny", "--only", "softmax,row_sum", "--shard", "0/2"]) == 0
    )
    out = capsys.readouterr().out
    assert "plan=coop" in out and "cases passed" in out and "FAILED" not in out
