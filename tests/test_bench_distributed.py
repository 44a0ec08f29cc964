"""Multi-GPU runs on the CPU: the cost-balanced sharding (bench/shard.py), and the gather, merge
and resume logic of bench/distributed.py with the gloo backend, several spawned CPU processes
and the fake timing backend of test_bench_fakes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from warpgauge import artifacts
from warpgauge.bench import distributed, shard
from warpgauge.bench.suite import Group

from .test_bench_fakes import Counter, FakeClock, fake_add_spec, fake_services, fake_suite

NUMELS = (256, 512, 1024, 2048, 4096, 8192)


# ------------------------------------------------------------------------------------ sharding


def _items(costs: dict[str, float], kernel=lambda k: k, compile_s=0.0) -> list[shard.Item]:
    return [shard.Item(k, (k + "/cold",), c, (kernel(k),), compile_s) for k, c in costs.items()]


def test_lpt_balances_cost_not_names():
    # One heavy item and many light ones: round-robin by name would give rank 0 the heavy item
    # and half the light ones; LPT leaves the heavy one alone on its rank.
    costs = {"a-heavy": 10.0, **{f"b{i}": 1.0 for i in range(10)}}
    shards = shard.assign(_items(costs), 2)
    heavy = next(r for r, s in enumerate(shards) if any(i.key == "a-heavy" for i in s))
    assert [i.key for i in shards[heavy]] == ["a-heavy"]
    assert sorted(shard.loads(shards)) == [10.0, 10.0]


def test_lpt_deterministic_and_every_item_once():
    costs = {f"g{i}": float((i * 7919) % 13 + 1) for i in range(40)}
    for world in (1, 2, 3, 5, 8, 64):
        a = shard.assign(_items(costs), world)
        b = shard.assign(list(reversed(_items(costs))), world)  # input order does not matter
        assert [[i.key for i in s] for s in a] == [[i.key for i in s] for s in b]
        keys = [i.key for s in a for i in s]
        assert sorted(keys) == sorted(costs) and len(keys) == len(set(keys))
        ld = shard.loads(a)
        # LPT bound: no rank exceeds the mean by more than the largest item
        assert max(ld) <= sum(costs.values()) / world + max(costs.values()) + 1e-9


def test_compile_cost_once_per_kernel_keeps_kernels_together():
    # Two kernels, each with four cheap groups and a large compile cost: each rank takes one
    # kernel (compiling once) rather than both kernels split over both ranks.
    costs = {f"{k}{i}": 1.0 for k in "xy" for i in range(4)}
    shards = shard.assign(_items(costs, kernel=lambda k: k[0], compile_s=20.0), 2)
    assert all(len({i.kernel for i in s}) == 1 for s in shards)
    assert shard.loads(shards) == [24.0, 24.0]


def test_assign_rejects_bad_world_size():
    with pytest.raises(ValueError, match="world_size"):
        shard.assign([], 0)


def test_shard_cases_uses_the_work_model():
    # add is memory-bound: the largest group costs most, whatever its name sorts as.
    clock = FakeClock()
    suite = fake_suite(numels=(1 << 34, 256, 512, 1024), lanes=("cold",), max_samples=50)
    ops = {"add": fake_add_spec(clock, Counter())}
    items = {i.key: i.cost_s for i in shard.estimate(suite, ops, suite.case_ids())}
    assert items["add/float32/17179869184"] > 5 * items["add/float32/256"]
    shards = shard.shard_cases(suite, ops, suite.case_ids(), 2)
    assert shards[0] == ["add/float32/17179869184/cold"]
    assert sorted(shards[1]) == sorted(c for c in suite.case_ids() if "17179869184" not in c)


def test_shard_cases_partial_todo_and_lanes_stay_together():
    suite = fake_suite(numels=NUMELS, lanes=("cold", "warm"))
    todo = [c for c in suite.case_ids() if c != "add/float32/256/cold"]
    shards = shard.shard_cases(suite, None, todo, 3)
    flat = [c for s in shards for c in s]
    assert sorted(flat) == sorted(todo)
    for s in shards:  # a group's lanes are never split across ranks
        groups = {c.rsplit("/", 1)[0] for c in s}
        for other in shards:
            if other is not s:
                assert not groups & {c.rsplit("/", 1)[0] for c in other}


def test_plans_suite_shards_with_the_same_machinery():
    from warpgauge.bench.modes import specs_for
    from warpgauge.bench.suite import load_suite

    suite = load_suite("plans", quick=True)
    assert suite.mode == "plans"
    ops = specs_for(suite, sm_count=1)
    shards = shard.shard_cases(suite, ops, suite.case_ids(), 4)
    flat = [c for s in shards for c in s]
    assert sorted(flat) == sorted(suite.case_ids()) and len(flat) == len(set(flat))
    assert all(shards), "every rank gets plan cells"
    assert shard.shard_cases(suite, ops, suite.case_ids(), 4) == shards


def test_kernel_key_drops_runtime_dims():
    a = Group("softmax", "bfloat16", "a", (("rows", 1), ("width", 4096)))
    b = Group("softmax", "bfloat16", "b", (("rows", 4096), ("width", 4096)))
    c = Group("softmax", "bfloat16", "c", (("rows", 1), ("width", 4097)))
    assert shard.kernel_key(a) == shard.kernel_key(b) != shard.kernel_key(c)


# ------------------------------------------------------------------------------------ launching


def test_torchrun_command_and_rank_env():
    cmd = distributed.torchrun_command(2, ["bench", "--gpus", "2", "--quick", "--gpus=2"])
    assert cmd[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert "--nproc-per-node=2" in cmd and cmd[-3:] == ["warpgauge", "bench", "--quick"]
    with pytest.raises(ValueError, match="--gpus"):
        distributed.torchrun_command(0, [])
    assert distributed.RankInfo.from_env({}) is None
    env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}
    assert distributed.RankInfo.from_env(env) == distributed.RankInfo(1, 2, 1)
    off = distributed.nvls_off_env({"PATH": "x", "NCCL_NVLS_ENABLE": "1"})
    assert off["NCCL_NVLS_ENABLE"] == "0" and off["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert off["NVSHMEM_DISABLE_NVLS"] == "1" and off["PATH"] == "x"


def test_cli_gpus_starts_torchrun_with_multicast_off(monkeypatch, tmp_path):
    import subprocess

    from typer.testing import CliRunner

    from warpgauge.cli import app

    seen = {}

    class Done:
        returncode = 0

    def fake_run(cmd, env=None, **kw):
        seen.update(cmd=cmd, env=env)
        return Done()

    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setattr(sys, "argv", ["warpgauge", "bench", "--gpus", "2", "--quick"])
    res = CliRunner().invoke(app, ["bench", "--gpus", "2", "--quick", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "--nproc-per-node=2" in seen["cmd"] and "--gpus" not in seen["cmd"]
    assert seen["env"]["NCCL_NVLS_ENABLE"] == "0"
    assert seen["env"]["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert seen["env"]["NVSHMEM_DISABLE_NVLS"] == "1"


# ------------------------------------------------------------------------------------ gloo ranks


def _rank_main(
    rank: int, world: int, tmp: str, stage: str, interrupt_rank: int, resume: str, repeat: int
):
    """One spawned rank: a gloo group over a file store, fake services, one run_distributed."""
    import torch.distributed as dist

    os.environ.setdefault("TRITON_INTERPRET", "1")
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp}/pg-{stage}", rank=rank, world_size=world
    )
    try:
        suite = fake_suite(numels=NUMELS, lanes=("cold", "warm"))
        clock = FakeClock()
        # the interrupted rank stops after its first group (8 providers x a few calls)
        n = 60 if rank == interrupt_rank else None

        def make(local_rank):
            return fake_services(clock, fake_add_spec(clock, Counter(), interrupt_after=n))

        info = distributed.RankInfo(rank, world, rank)
        code, dirs = distributed.run_repeated(
            suite, make, ["warpgauge", "bench"], info, repeat=repeat, out_root=Path(tmp) / "out",
            resume=Path(resume) if resume else None,
        )  # fmt: skip
        status = [artifacts.load_run(d).run["status"] for d in dirs]
        Path(tmp, f"{stage}-{rank}.json").write_text(
            json.dumps({"code": code, "dir": str(dirs[0]), "dirs": [str(d) for d in dirs],
                        "status": status[-1]})
        )  # fmt: skip
    finally:
        dist.destroy_process_group()


def _spawn(tmp: Path, world: int, stage: str, interrupt_rank=-1, resume="", repeat=1) -> list:
    args = (world, str(tmp), stage, interrupt_rank, resume, repeat)
    mp.spawn(_rank_main, args=args, nprocs=world)
    return [json.loads((tmp / f"{stage}-{r}.json").read_text()) for r in range(world)]


def _check_valid(run_dir: Path, missing: list[str] = ()) -> None:
    """validate_run finds nothing wrong but the missing cases of an interrupted run."""
    problems = [p for p in artifacts.validate_run(run_dir) if p != artifacts.SCHEMA_SKIPPED]
    if missing:
        n = len(missing)
        assert any(p.startswith(f"coverage: {n} of") for p in problems)
        problems = [p for p in problems if not p.startswith(f"coverage: {n} of")
                    and f"({n} of" not in p]  # fmt: skip
    assert problems == []


def _by_rank(run_dir: Path) -> dict[int, set]:
    out: dict[int, set] = {}
    for case in artifacts.load_run(run_dir).cases:
        out.setdefault(case["extra"]["rank"]["rank"], set()).add(case["case_id"])
    return out


def test_two_ranks_one_run_one_manifest_and_repeat(tmp_path):
    outs = _spawn(tmp_path, 2, "a", repeat=2)
    assert {o["code"] for o in outs} == {0} and len({o["dir"] for o in outs}) == 1
    assert len({tuple(o["dirs"]) for o in outs}) == 1 and len(outs[0]["dirs"]) == 2
    run_dir = Path(outs[0]["dir"])
    again = Path(outs[0]["dirs"][1])
    _check_valid(run_dir)
    _check_valid(again)
    assert _by_rank(again) == _by_rank(run_dir)  # --repeat shards each run the same way
    loaded = artifacts.load_run(run_dir)
    run = loaded.run
    assert run["status"] == "complete" and run["world_size"] == 2
    assert sorted(e["rank"] for e in run["ranks"]) == [0, 1]
    assert all(e["ceilings"]["copy_tbps"] for e in run["ranks"])
    suite = fake_suite(numels=NUMELS, lanes=("cold", "warm"))
    assert [c["case_id"] for c in loaded.cases] == suite.case_ids()
    by_rank = {0: set(), 1: set()}
    for case in loaded.cases:  # each case names the rank that ran it, and is this run's
        assert case["run_id"] == run["run_id"]
        by_rank[case["extra"]["rank"]["rank"]].add(case["case_id"])
    assert all(by_rank.values()) and not by_rank[0] & by_rank[1]
    want = shard.shard_cases(suite, None, suite.case_ids(), 2)
    assert [set(w) for w in want] == [by_rank[0], by_rank[1]]  # the cost-balanced plan
    for e in run["ranks"]:
        assert set(e["cases"]) == by_rank[e["rank"]]
    assert run["ceilings"]["copy_tbps"] and (run_dir / "ceilings.json").is_file()
    from warpgauge import report, report_tables

    facts = dict(report._run_facts(loaded))
    assert "world size 2" in facts["GPUs (multi-GPU run)"]
    assert facts["GPUs (multi-GPU run)"].count("case(s)") == 2
    case = loaded.cases[0]
    own = dict(case["extra"]["rank"]["ceilings"], copy_tbps=123.0)
    case["extra"]["rank"]["ceilings"] = own  # the report reads the case's own GPU's ceiling
    assert report_tables.ceiling(loaded, "add", "float32", case) == 123.0
    assert report_tables.ceiling(loaded, "add", "float32") == run["ceilings"]["copy_tbps"]


def test_interrupted_rank_loses_only_its_unfinished_cases_then_resume_on_one(tmp_path):
    outs = _spawn(tmp_path, 3, "b", interrupt_rank=1)
    run_dir = Path(outs[0]["dir"])
    assert {o["code"] for o in outs} == {130}  # every rank reports the run's outcome
    run = artifacts.load_run(run_dir).run
    assert run["status"] == "interrupted" and run["missing_cases"]
    suite = fake_suite(numels=NUMELS, lanes=("cold", "warm"))
    plan = shard.shard_cases(suite, None, suite.case_ids(), 3)
    assert set(run["finished_cases"]) >= set(plan[0]) | set(plan[2])
    assert set(run["missing_cases"]) <= set(plan[1])
    _check_valid(run_dir, run["missing_cases"])  # an interrupted run is still a consistent one
    outs = _spawn(tmp_path, 1, "c", resume=str(run_dir))
    assert outs[0]["code"] == 0 and outs[0]["status"] == "complete"
    loaded = artifacts.load_run(run_dir)
    assert loaded.run["missing_cases"] == [] and len(loaded.cases) == len(suite.case_ids())
    sessions = {c["case_id"]: c["extra"]["rank"]["session"] for c in loaded.cases}
    assert {sessions[c] for c in run["missing_cases"]} == {1}
    assert {sessions[c] for c in run["finished_cases"]} == {0}
    _check_valid(run_dir)


def test_plain_resume_of_a_multi_gpu_run_goes_through_torchrun(monkeypatch, tmp_path):
    import subprocess

    from typer.testing import CliRunner

    from warpgauge.bench.runner import run_bench
    from warpgauge.cli import app

    clock = FakeClock()
    suite = fake_suite(numels=(256,), lanes=("cold",))
    out = run_bench(suite, fake_services(clock, fake_add_spec(clock, Counter())), ["t"], tmp_path)
    run = artifacts.load_run(out.run_dir).run
    artifacts.write_run(out.run_dir, {**run, "world_size": 2})
    seen = {}

    class Done:
        returncode = 3

    def fake_run(cmd, env=None, **kw):
        seen.update(cmd=cmd, env=env)
        return Done()

    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(subprocess, "run", fake_run)
    argv = ["bench", "--resume", str(out.run_dir)]
    monkeypatch.setattr(sys, "argv", ["warpgauge", *argv])
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 3, res.output  # torchrun's exit code is bench's
    assert "--nproc-per-node=1" in seen["cmd"] and seen["cmd"][-2:] == [
        "--resume",
        str(out.run_dir),
    ]
    assert seen["env"]["NCCL_NVLS_ENABLE"] == "0"


def test_merge_takes_in_rank_cases_and_hung_providers(tmp_path):
    """In one process: a rank run left by a killed session is merged into the run at resume,
    and a provider that hung in a rank is recorded in the run (skipped when it resumes)."""
    from warpgauge.bench.runner import QuietUI, Runner

    clock = FakeClock()
    suite = fake_suite(numels=(256, 512), lanes=("cold",))
    sv = fake_services(clock, fake_add_spec(clock, Counter()))
    main = Runner(suite, sv, ["t"])
    run, _ = main._open_new(tmp_path)
    sub = Runner(suite, sv, ["t"])
    sub.only = {"add/float32/256/cold"}
    sub.target = (f"{main.run_id}.s0-r1", main.run_dir / "ranks" / "s0-r1")
    assert sub.run().status == "interrupted"  # the rank run holds only its own case
    rank_run = artifacts.read_json(sub.run_dir / "run.json")
    rank_run["extra"]["hung"] = [{"group": "add/float32/512", "provider": "peer", "what": "gate",
                                  "limit_s": 1.0, "at": rank_run["created_at"]}]  # fmt: skip
    artifacts.write_run(sub.run_dir, rank_run)
    entries = distributed.merge_rank_runs(artifacts, main.run_dir, QuietUI())
    assert [e["cases"] for e in entries] == [["add/float32/256/cold"]]
    merged = artifacts.load_run(main.run_dir)
    assert [c["case_id"] for c in merged.cases] == ["add/float32/256/cold"]
    assert merged.cases[0]["run_id"] == main.run_id
    assert merged.cases[0]["extra"]["rank"]["rank_run"] == "ranks/s0-r1"
    assert [h["provider"] for h in merged.run["extra"]["hung"]] == ["peer"]
    assert distributed.merge_rank_runs(artifacts, main.run_dir, QuietUI()) == entries  # idempotent
    problems = [p for p in artifacts.validate_run(main.run_dir) if "add/float32/512" not in p]
    assert [p for p in problems if p != artifacts.SCHEMA_SKIPPED and "(1 of" not in p] == []


def test_case_rates_are_checked_against_their_own_gpus_ceilings(tmp_path):
    from warpgauge.artifacts.rules import case_problems

    outs = _spawn(tmp_path, 1, "d")
    loaded = artifacts.load_run(Path(outs[0]["dir"]))
    case = loaded.cases[0]
    assert any(p["derived"].get("pct_copy_ceiling") for p in case["providers"])
    other_gpu = {**loaded.run, "ceilings": {**loaded.run["ceilings"], "copy_tbps": 1e-3}}
    assert case_problems(case, other_gpu) == []  # the run's (rank 0's) ceiling is not this GPU's
    wrong = json.loads(json.dumps(case))
    wrong["extra"]["rank"]["ceilings"]["copy_tbps"] *= 2
    assert any("pct_copy_ceiling" in p for p in case_problems(wrong, loaded.run))
    del wrong["extra"]["rank"]  # a single-GPU case: the run's ceiling
    assert any("pct_copy_ceiling" in p for p in case_problems(wrong, other_gpu))
