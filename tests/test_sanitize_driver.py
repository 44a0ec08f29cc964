"""The sanitizer driver (scripts/sanitize.sh runs it under compute-sanitizer on the GPU): its
cases reach every row plan kind, and the row-operator cases pass under the interpreter."""

from __future__ import annotations

from warpgauge.tools import sanitize_driver


def test_cases_reach_every_row_plan_kind(capsys):
    assert sanitize_driver.main(["--size", "tiny", "--list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    for op in ("softmax", "add_rms_norm", "row_sum"):
        kinds = {ln.rsplit("plan=", 1)[1] for ln in listed if ln.startswith(op + ":")}
        assert kinds == {"resident", "looped", "split", "coop", "coop_sub"}, (op, kinds)
    assert {ln.split(":")[0] for ln in listed} >= {"gemm", "int4_linear", "add"}
    # the pipelined INT4 GEMVs (the batch-1 default) are forced too
    assert any(ln.startswith("int4_linear:") and "pipeline=3" in ln for ln in listed)


def test_row_cases_pass_on_the_interpreter(capsys):
    assert (
        sanitize_driver.main(["--size", "tiny", "--only", "softmax,row_sum", "--shard", "0/2"]) == 0
    )
    out = capsys.readouterr().out
    assert "plan=coop" in out and "cases passed" in out and "FAILED" not in out
