"""Regret scoring of plan rules, the held-out fit, the plans report, and the stability log."""

from __future__ import annotations

import dataclasses
import json

import pytest

from warpgauge.bench import stability
from warpgauge.bench.modes import regret, regret_report
from warpgauge.bench.modes.regret import Cell

SM = 4


def truth(rows: int, width: int) -> str:
    """The planted best plan: resident up to 16384, split below 2 rows per SM, else looped."""
    if width <= 16384:
        return "resident"
    return "split_2048" if rows < 2 * SM else "looped_4096"


def _cells(seed_rule_key=None):
    """A synthetic grid whose best plan is ``truth`` (1.0 us); every other plan is slower by a
    factor that grows with its position, so the planted rule has zero regret."""
    out = []
    for rows in (1, 2, 4, 6, 8, 12, 16, 32, 64):
        for width in (4096, 12288, 16384, 20000, 40000, 65537, 131072):
            keys = ["looped_1024", "looped_2048", "looped_4096", "looped_8192", "split_2048",
                    "split_4096"] + (["resident"] if width <= 32768 else [])  # fmt: skip
            best = truth(rows, width)
            times = {k: (1.0 if k == best else 1.05 + 0.1 * i) for i, k in enumerate(keys)}
            rk = seed_rule_key(rows, width) if seed_rule_key else best
            out.append(Cell("softmax", "bfloat16", f"{rows}x{width}", "cold", rows, width, SM,
                            times, rk, times.get(rk)))  # fmt: skip
    return out


def test_regret_is_rule_time_over_best_minus_one():
    c = Cell("softmax", "bf16", "4x100", "cold", 4, 100, SM, {"a": 2.0, "b": 2.5, "c": 3.0},
             "b", 2.6)  # fmt: skip
    s = regret.score([c], regret.current)
    assert s["mean"] == pytest.approx(0.25) and s["over_10pct"] == 1 and s["missing"] == 0
    gone = Cell("softmax", "bf16", "4x100", "cold", 4, 100, SM, {"a": 2.0}, "zzz", None)
    assert regret.score([gone], regret.current)["missing"] == 1


def test_fit_finds_the_planted_rule_and_scores_the_held_out_half():
    cells = _cells()
    fit_half = [c for c in cells if c.half() == 0]
    held = [c for c in cells if c.half() == 1]
    assert fit_half and held and len(fit_half) + len(held) == len(cells)
    rule = regret.fit(fit_half)
    assert regret.score(fit_half, rule.choose)["mean"] == pytest.approx(0.0)
    seen = [c for c in held if regret.region(c) in rule.table]
    assert len(seen) > len(held) / 2
    # the planted boundaries (16384 wide, 2 rows per SM) sit on region edges: zero regret on
    # every held-out cell whose region the fit half saw; the others take the fallback plan
    s = regret.score(seen, rule.choose)
    assert s["n"] == len(seen) and s["mean"] == pytest.approx(0.0) and s["over_10pct"] == 0
    assert regret.score(held, rule.choose)["n"] == len(held)
    # a wrong rule has regret on the same cells
    wrong = regret.score(held, lambda c: "looped_8192")
    assert wrong["mean"] > 0.04 and wrong["p90"] > 0 and wrong["missing"] == 0
    assert all(v in {"resident", "split_2048", "looped_4096"} for v in rule.table.values())


def test_summary_and_markdown(tmp_path, monkeypatch):
    a = _cells(seed_rule_key=lambda r, w: "looped_8192" if w > 16384 else "resident")
    b = [Cell(**{**c.__dict__, "times": {k: t * 1.02 for k, t in c.times.items()}}) for c in a]
    runs = {"run-a": a, "run-b": b}
    monkeypatch.setattr(regret, "load_cells", lambda d: runs[str(d)])
    summ = regret.summarize(["run-a", "run-b"])
    cur = summ["ops"]["all"]["current"]
    assert len(cur) == 2 and cur[0]["mean"] > 0.0
    assert cur[0]["mean"] == pytest.approx(cur[1]["mean"])  # uniform 2% drift: same regret
    assert summ["noise"]["median"] == pytest.approx(0.02 / 1.02, rel=1e-3)
    fitted = summ["ops"]["softmax"]["fitted"]
    assert fitted["fit"]["mean"] == pytest.approx(0.0)
    assert fitted["held_out"]["mean"] < fitted["current_held_out"]["mean"]
    assert summ["ops"]["softmax"]["split_vs_loop"]
    md = regret_report.markdown(summ)
    for text in ("Regret of the rules", "held-out", "Noise", "Split against loop", "Worst cells"):
        assert text in md
    doc = tmp_path / "plans.md"
    doc.write_text(f"intro\n{regret_report.BEGIN}\nplaceholder\n{regret_report.END}\noutro\n")
    regret_report.write_into(doc, md)
    text = doc.read_text()
    assert text.startswith("intro\n") and text.endswith("outro\n") and "placeholder" not in text


def test_the_checkout_rule_is_scored_beside_the_recorded_one(monkeypatch):
    """summarize(checkout=...) scores a chooser on every cell and on each half; the report
    shows it. The planted rule as the checkout's: zero regret where the recorded one has some."""
    a = _cells(seed_rule_key=lambda r, w: "looped_8192" if w > 16384 else "resident")
    monkeypatch.setattr(regret, "load_cells", lambda d: a)
    summ = regret.summarize(["run-a"], checkout=lambda c: truth(c.rows, c.width))
    ck = summ["ops"]["softmax"]["checkout"]
    assert ck["all"]["mean"] == pytest.approx(0.0) and ck["all"]["n"] == len(a)
    assert ck["half0"]["n"] + ck["half1"]["n"] == len(a)
    assert summ["ops"]["softmax"]["current"][0]["mean"] > 0.04
    md = regret_report.markdown(summ)
    assert "this checkout's rule" in md and "half 0" in md
    assert "checkout" not in regret.summarize(["run-a"])["ops"]["softmax"]


def test_checkout_choice_uses_the_runs_l2_size():
    """plans.checkout_choice asks the committed rule with the cell's SM count and the run's L2
    size: a softmax input past 8x a 60 MiB L2 takes the looped cooperative plan, the register
    cooperative plan without an L2 size (rows9 rule)."""
    from warpgauge.bench.modes import plans

    def cell(l2):
        return Cell("softmax", "bfloat16", "4096x131072", "cold", 4096, 131072, 132, {}, None,
                    None, l2_bytes=l2)  # fmt: skip

    assert plans.checkout_choice(cell(60 * 2**20)) == "coop_8192_w2_ev"  # S15: 2-warp programs
    assert plans.checkout_choice(cell(0)) == "coop_2048_w1"  # G16: one warp's 2048 chunks
    assert plans.checkout_choice(Cell("softmax", "bfloat16", "1x1", "cold", 1, 1, 0, {}, None,
                                      None)) is None  # fmt: skip


def test_checkout_choice_matches_the_runs_plans_by_repr():
    """A run names its plans in candidate order, so the key of a plan depends on the rule that
    ran (``_x2`` goes to whichever copy came second). With the run's reprs recorded the
    checkout's plan is found by its repr, whatever key the run gave it; a plan the run did not
    force is reported as unmeasured (and scored as missing), never as another plan."""
    from warpgauge.bench.modes import plans
    from warpgauge.kernels.plans import RowPlan

    want = RowPlan.for_shape(4096, 131072, 132, "softmax", l2_bytes=60 * 2**20)
    other = RowPlan.coop(8192, 2, sub=2048, evict=True)  # the same key without ex2 exps
    assert plans.plan_key(other) == plans.plan_key(want)
    times = {"coop_8192_w2_ev": 10.0, "coop_8192_w2_ev_x2": 9.0}

    def cell(reprs):
        return Cell("softmax", "bfloat16", "4096x131072", "cold", 4096, 131072, 132, times,
                    None, None, l2_bytes=60 * 2**20, reprs=reprs)  # fmt: skip

    swapped = {"coop_8192_w2_ev": repr(other), "coop_8192_w2_ev_x2": repr(want)}
    assert plans.checkout_choice(cell(swapped)) == "coop_8192_w2_ev_x2"
    missing = plans.checkout_choice(cell({"coop_8192_w2_ev": repr(other)}))
    assert missing.startswith("unmeasured: ") and missing not in times
    scored = regret.score([cell({"coop_8192_w2_ev": repr(other)})], plans.checkout_choice)
    assert scored["missing"] == 1 and scored["n"] == 0


def test_load_cells_keeps_the_plan_reprs(tmp_path, monkeypatch):
    """load_cells carries each forced plan's recorded repr (provider extra ``plan_repr``)."""
    from warpgauge.bench.modes import regret as R

    case = {"op": "softmax", "dtype": "bfloat16", "shape_label": "2x8", "lane": "cold",
            "shape": {"rows": 2, "width": 8}, "providers": [
                {"name": "rule", "status": "ok", "device_time": {"median_us": 2.0},
                 "extra": {"plan": "resident_8", "sm_count": 4}},
                {"name": "resident_8", "status": "ok", "device_time": {"median_us": 1.5},
                 "extra": {"plan_repr": "RowPlan(kind='resident')"}}]}  # fmt: skip

    class Run:
        run = {"provenance": {"gpu": {"l2_bytes": 1024}}}
        cases = [case]

    import warpgauge.artifacts as A

    monkeypatch.setattr(A, "load_run", lambda _d: Run())
    (c,) = R.load_cells(tmp_path)
    assert c.reprs == {"resident_8": "RowPlan(kind='resident')"} and c.times == {"resident_8": 1.5}
    assert c.l2_bytes == 1024 and c.rule_key == "resident_8"


def test_stability_log_from_two_fake_runs(tmp_path):
    from warpgauge.bench.runner import run_bench

    from .test_bench_fakes import Counter, FakeClock, fake_add_spec, fake_services, fake_suite

    dirs = []
    for slow in (1.0, 1.3):
        clock, counter = FakeClock(), Counter()
        spec = fake_add_spec(clock, counter)
        if slow != 1.0:  # the second run: torch 30% slower, everything else the same
            import dataclasses

            provs = []
            for p in spec.providers:
                if p.name == "torch":
                    inner = p.build

                    def build(inp, ctx, inner=inner, clock=clock):
                        b = inner(inp, ctx)
                        fn = b.fn

                        def slower():
                            clock.advance(6e-6)
                            return fn()

                        return dataclasses.replace(b, fn=slower)

                    p = dataclasses.replace(p, build=build)
                provs.append(p)
            spec = dataclasses.replace(spec, providers=tuple(provs))
        out = run_bench(fake_suite(numels=(1024,)), fake_services(clock, spec), ["x"],
                        out_root=tmp_path)  # fmt: skip
        dirs.append(out.run_dir)
    path, summ = stability.write(tmp_path, dirs)
    assert summ["n_ratios"] > 0
    moved = [r for r in summ["ratios"] if r["ratio"].endswith("/torch")]
    assert moved and all(r["spread"] > 0.10 for r in moved)
    assert summ["n_agree"] == summ["n_ratios"] - len(moved)
    assert json.loads(path.read_text())["fraction_agree"] == pytest.approx(summ["fraction_agree"])
    assert "ratios agree within 10%" in (tmp_path / f"{dirs[0].name}-stability.md").read_text()


def test_noise_matches_plans_by_recorded_repr():
    """Between two runs whose rules differ, a key can name another plan (the rule's own plan
    is the unsuffixed key): noise pairs the plans by their recorded reprs, by key without them."""
    early, late = "RowPlan(w_early=True)", "RowPlan(w_early=False)"
    a = Cell("add_rms_norm", "bfloat16", "1x4096", "warm", 1, 4096, SM,
             {"resident_4096": 2.0, "resident_4096_x2": 1.0}, "resident_4096", 2.0,
             reprs={"resident_4096": late, "resident_4096_x2": early})  # fmt: skip
    b = Cell("add_rms_norm", "bfloat16", "1x4096", "warm", 1, 4096, SM,
             {"resident_4096": 1.0, "resident_4096_x2": 2.0}, "resident_4096", 1.0,
             reprs={"resident_4096": early, "resident_4096_x2": late})  # fmt: skip
    assert regret.noise([a], [b]) == {"n": 2, "median": 0.0, "p90": 0.0}
    a, b = (dataclasses.replace(c, reprs={}) for c in (a, b))  # no reprs recorded: by key
    n = regret.noise([a], [b])
    assert n["n"] == 2 and n["median"] == pytest.approx(0.75)
