"""The harness under real faults on a real GPU (issue 14): `warpgauge bench` as a user runs it,
with plug-in providers that raise, run out of GPU memory, hang in Python, and block inside the
driver. Each is recorded as such while the run goes on; the driver hang ends the process (exit
5) after the finished cases are on disk; `--resume` finishes the run without re-running them; a
truncated artifact is then reported by `validate` with the file named. Skipped without CUDA."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

ROOT = Path(__file__).resolve().parents[2]
NUMELS = (1 << 20, 4 << 20, 16 << 20)
SUITE = """
name = "faults"
description = "A real run with faulty plug-in providers"
mode = "fwd"
seed = 7
lanes = ["cold"]
dtypes = ["bfloat16"]
max_minutes = 4.0

[sampling]
rounds = 2
target_ms = 5.0
host_share = 0.0
min_samples = 4
max_samples = 20
warmup_calls = 3
provider_timeout_s = 15.0
stuck_grace_s = 3.0

[compile]
modes = []
precompile_workers = 0

[ceilings]
copy_bytes = 268435456
mm_sizes = [1024]

[ops.add]
shapes = ["1M", "4M", "16M"]
"""


def _bench(args, tmp_path, timeout=240, capture=True):
    """Run ``python -m warpgauge ARGS``; ``capture=False`` streams its output (run pytest with
    ``-s`` to see a run's progress live, e.g. when a lane's time limit cuts it)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), str(ROOT / "tests" / "gpu"), env.get("PYTHONPATH", "")]
    )
    env["WG_FAULT_HANG_AT"] = str(NUMELS[0])
    env["WG_FAULT_STUCK_AT"] = str(NUMELS[1])
    env.pop("WARPGAUGE_POISON_OUTPUTS", None)  # the conftest sets it; bench refuses to measure
    cmd = [sys.executable, "-m", "warpgauge", *args]
    print(" ".join(cmd), flush=True)
    p = subprocess.run(
        cmd, cwd=tmp_path, env=env, capture_output=capture, text=True, timeout=timeout
    )
    print("->", p.returncode, "\n", (p.stdout or "")[-4000:], (p.stderr or "")[-4000:])
    return p


def _cases(run_dir: Path) -> dict:
    out = {}
    for f in sorted((run_dir / "cases").glob("*.json")):
        c = json.loads(f.read_text())
        out[c["case_id"]] = (f, {p["name"]: p for p in c["providers"]})
    return out


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_real_run_survives_faults_and_resumes(tmp_path):
    suite = tmp_path / "faults.toml"
    suite.write_text(SUITE)
    only = "warpgauge,torch,raises,oom,hangs,stuck"
    first = _bench(
        ["bench", "--suite", str(suite), "--ops", "add", "--only", only,
         "--provider", "faulty_plugin:register", "--out", str(tmp_path / "runs")],
        tmp_path, capture=False,
    )  # fmt: skip
    assert first.returncode == 5, "the driver hang must end the process with exit 5"
    (run_dir,) = [d for d in (tmp_path / "runs").iterdir() if d.is_dir()]
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "interrupted"
    hung = run["extra"]["hung"]
    assert [h["provider"] for h in hung] == ["stuck"] and "4M" in hung[0]["group"], hung
    done1 = _cases(run_dir)
    first_case = "add/bfloat16/1M/cold"
    assert first_case in done1 and "add/bfloat16/4M/cold" not in done1, sorted(done1)
    path1, by = done1[first_case]
    sha1 = _sha(path1)
    assert by["warpgauge"]["status"] == "ok" and by["torch"]["status"] == "ok"
    assert by["raises"]["status"] == "error" and "deliberate failure" in by["raises"]["error"]
    assert by["oom"]["status"] == "error" and "out of GPU memory" in by["oom"]["error"]
    assert by["hangs"]["status"] == "error" and "time limit" in by["hangs"]["error"]
    assert by["stuck"]["status"] == "absent"

    second = _bench(["bench", "--resume", str(run_dir)], tmp_path, capture=False)
    assert second.returncode == 0, "the resumed run completes"
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "complete" and len(run["extra"]["sessions"]) == 2
    done2 = _cases(run_dir)
    assert set(done2) == {f"add/bfloat16/{n}/cold" for n in ("1M", "4M", "16M")}
    assert _sha(done2[first_case][0]) == sha1, "a finished case was measured again"
    _, by4 = done2["add/bfloat16/4M/cold"]
    assert by4["stuck"]["status"] == "error" and "earlier session" in by4["stuck"]["error"]
    assert by4["warpgauge"]["status"] == "ok" and by4["hangs"]["status"] == "ok"

    ok = _bench(["validate", str(run_dir)], tmp_path, timeout=120)
    assert ok.returncode == 0
    victim = done2["add/bfloat16/16M/cold"][0]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    bad = _bench(["validate", str(run_dir)], tmp_path, timeout=120)
    assert bad.returncode == 1 and victim.name in (bad.stdout + bad.stderr)
