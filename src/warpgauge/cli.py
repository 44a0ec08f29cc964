"""``warpgauge``: one entry point, subcommands (one small function each; the work lives in
its own module).

    warpgauge bench [--mode fwd|fwd_bwd|host|accuracy|plans] [--suite NAME|FILE] [--ops a,b]
                    [--quick] [--lanes cold,warm] [--shapes GLOB] [--only P] [--skip P]
                    [--provider package.module:function] [--repeat N] [--out DIR]
                    [--resume RUN] [--max-minutes M] [--precompile-workers N]
    warpgauge plans-report RUN [RUN2]   regret tables of a plans-mode grid (docs/plans.md)
    warpgauge accuracy-report RUN       errors against FP64 and the tolerance probe
    warpgauge host-report RUN           host us per eager call beside PyTorch's
    warpgauge stability RUN RUN ...     per-ratio spread across runs of one suite
    warpgauge report RUN [--out DIR]        render the report from the artifacts (no GPU)
    warpgauge validate RUN [--json]         schema, checksums, coverage; non-zero with reasons
    warpgauge compare A B [--json] [--fail-above PCT] [--min-effect PCT]
    warpgauge export RUN [--format csv|parquet|json] [--out FILE]
    warpgauge providers [--json]            every provider and whether it is usable here
    warpgauge doctor [--json]               what this machine offers, each with the fix
    warpgauge cuda-softmax ...              the CUDA softmax program (arguments passed through)
    warpgauge --version
    warpgauge roofline RUN                  throughput vs intensity under the run's measured roofs
    warpgauge profile                       Nsight Compute metrics and the byte-model check
    warpgauge experiment NAME...            clock ramp, specialization, sweeps, Inductor, compile cost
    warpgauge artifacts compact RUN...      gzip the case files of finished runs (lossless)

Heavy modules (torch, the kernels, rich, matplotlib) are imported inside the commands.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Triton kernels with gated, honest, checksummed benchmark evidence.",
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        from warpgauge._version import version

        print(f"warpgauge {version() or 'unknown'}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Triton kernels with gated, honest, checksummed benchmark evidence."""


def _fail(msg: str, code: int = 2) -> typer.Exit:
    print(msg, file=sys.stderr)
    return typer.Exit(code)


def _split(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    out: list[str] = []
    for v in values:
        out += [p for p in v.replace(",", " ").split() if p]
    return out or None


@app.command()
def bench(
    suite: Annotated[
        str | None,
        typer.Option(help="Packaged suite name or path of a TOML file (default: the mode's)."),
    ] = None,
    mode: Annotated[
        str | None,
        typer.Option(help="fwd, fwd_bwd, host, accuracy or plans (default: the suite's, fwd)."),
    ] = None,
    shapes: Annotated[
        list[str] | None,
        typer.Option(help="Only shapes matching these globs (label, op/label or op/dtype/label)."),
    ] = None,
    only: Annotated[
        list[str] | None, typer.Option(help="Only these providers (name or op.name).")
    ] = None,
    skip: Annotated[list[str] | None, typer.Option(help="Leave these providers out.")] = None,
    provider: Annotated[
        list[str] | None,
        typer.Option(help="Provider plug-in package.module:function (repeatable)."),
    ] = None,
    repeat: Annotated[
        int, typer.Option(help="Run the suite N times and write the stability log.")
    ] = 1,
    ops: Annotated[
        list[str] | None, typer.Option(help="Operators to run (comma-separated or repeated).")
    ] = None,
    quick: Annotated[
        bool, typer.Option(help="Only the suite's quick shapes: a first look.")
    ] = False,
    lanes: Annotated[
        str | None, typer.Option(help="cold, warm or cold,warm (default: the suite's).")
    ] = None,
    out: Annotated[Path, typer.Option(help="Directory that receives <run-id>/.")] = Path("results"),
    resume: Annotated[
        str | None,
        typer.Option(help="Finish an interrupted run (its directory, or its id under --out)."),
    ] = None,
    max_minutes: Annotated[
        float | None,
        typer.Option(
            help="Stop starting new cases after this many minutes (default: the suite's, 9)."
        ),
    ] = None,
    precompile_workers: Annotated[
        int | None, typer.Option(help="Processes compiling ahead of measurement (0: none).")
    ] = None,
    device: Annotated[int, typer.Option(help="CUDA device index.")] = 0,
    gpus: Annotated[
        int, typer.Option(help="Shard the run over N GPUs of this host (starts torchrun).")
    ] = 0,
) -> None:
    """Gate, time and record every provider of every case of a suite (needs a CUDA GPU).
    Under ``torchrun --nproc-per-node N -m warpgauge bench ...`` (or with ``--gpus N``) one
    process per GPU measures a cost-balanced share of the cases into one run."""
    from warpgauge.bench.suite import MODE_SUITES, Suite, SuiteError, load_suite

    resume_dir: Path | None = None
    try:
        if resume:
            resume_dir = Path(resume)
            if not resume_dir.is_dir() and (out / resume).is_dir():
                resume_dir = out / resume
            if not (resume_dir / "run.json").is_file():
                raise _fail(f"warpgauge bench: --resume {resume}: no run.json in {resume_dir}")
            from warpgauge import artifacts

            chosen = Suite.from_config(artifacts.load_run(resume_dir).run["config"])
            if ops or quick or lanes or suite or mode or shapes:
                print(
                    "warpgauge bench: --resume measures the run's own suite; --suite/--ops/--quick/--lanes are ignored",
                    file=sys.stderr,
                )
        else:
            chosen = load_suite(
                suite or MODE_SUITES.get(mode or "fwd", "default"),
                quick=quick,
                ops=_split(ops),
                lanes=_split([lanes] if lanes else None),
                shapes=_split(shapes),
            )
            from warpgauge.bench import plugins

            chosen = chosen.with_overrides(
                mode=mode,
                only=_split(only),
                skip=_split(skip),
                plugins=[*(_split(provider) or []), *plugins.entry_point_specs()],
            )
        chosen = chosen.with_overrides(
            max_minutes=max_minutes, precompile_workers=precompile_workers
        )
        if repeat < 1:
            raise _fail("warpgauge bench: --repeat must be >= 1")
        if repeat > 1 and resume_dir is not None:
            raise _fail("warpgauge bench: --repeat makes new runs; it cannot be used with --resume")
        from warpgauge.bench.modes import specs_for

        specs_for(chosen, sm_count=1)  # plug-ins and --only/--skip: errors before any GPU work
    except SuiteError as e:
        raise _fail(f"warpgauge bench: {e}") from None
    except (OSError, ValueError) as e:
        raise _fail(f"warpgauge bench: {e}") from None

    import os

    from warpgauge.bench import distributed

    rank_info = distributed.RankInfo.from_env()
    if resume_dir is not None and not gpus and rank_info is None:
        from warpgauge import artifacts

        if "world_size" in artifacts.load_run(resume_dir).run:
            gpus = 1  # a multi-GPU run resumes through its rank runs (taken in, then sharded)
    if gpus and rank_info is None:
        import subprocess

        cmd = distributed.torchrun_command(gpus, sys.argv[1:])
        print("warpgauge bench: " + " ".join(cmd), file=sys.stderr)
        raise typer.Exit(subprocess.run(cmd, env=distributed.nvls_off_env()).returncode)
    if rank_info is not None:
        os.environ.update(distributed.NVLS_OFF)
        device = rank_info.local_rank
    if os.environ.get("WARPGAUGE_POISON_OUTPUTS", "0") not in ("", "0"):
        raise _fail(
            "warpgauge bench: WARPGAUGE_POISON_OUTPUTS is set (a test setting that adds a NaN fill to "
            "every warpgauge call); unset it to measure"
        )
    import torch

    if not torch.cuda.is_available():
        raise _fail(
            "warpgauge bench: no CUDA GPU is visible here (torch.cuda.is_available() is False); "
            "bench measures on a CUDA device only (try `warpgauge providers`, `report`, `validate`)"
        )
    from warpgauge.bench.runner import default_services, run_bench
    from warpgauge.bench.ui import RichUI

    if rank_info is not None:
        raise typer.Exit(_bench_rank(chosen, rank_info, repeat, out, resume_dir))
    ui = RichUI()
    try:
        services = default_services(chosen, device_index=device, ui=ui)
    except RuntimeError as e:
        raise _fail(f"warpgauge bench: cannot use CUDA device {device}: {e}") from None
    argv = ["warpgauge", *sys.argv[1:]]
    codes, dirs = [], []
    for i in range(repeat):
        if i:
            services = default_services(chosen, device_index=device, ui=ui)
        try:
            outcome = run_bench(chosen, services, argv, out_root=out, resume=resume_dir)
        except (OSError, SuiteError, ImportError, ValueError) as e:  # before the run started
            from warpgauge.bench.runner import format_error

            raise _fail(f"warpgauge bench: could not start the run: {format_error(e)}", 1) from None
        codes.append(outcome.exit_code)
        if outcome.run_dir is not None:
            dirs.append(outcome.run_dir)
        if outcome.exit_code not in (0,) and outcome.status != "complete":
            break
    if repeat > 1 and len(dirs) > 1:
        from warpgauge.bench import stability

        path, summ = stability.write(out, dirs)
        print(
            f"stability: {summ['n_agree']} of {summ['n_ratios']} ratios agree within 10% -> {path}"
        )
    raise typer.Exit(max(codes, key=abs) if codes else 1)


def _bench_rank(chosen, info, repeat: int, out: Path, resume_dir: Path | None) -> int:
    """One torchrun process: pin the GPU from LOCAL_RANK before CUDA starts, join the gloo
    group, measure this rank's share (``--repeat`` shards each repetition the same way)."""
    import torch

    from warpgauge.bench import distributed
    from warpgauge.bench.runner import default_services
    from warpgauge.bench.ui import RichUI

    torch.cuda.set_device(info.local_rank)
    distributed.init_gloo(info)
    ui = RichUI() if info.rank == 0 else distributed.RankUI(info.rank)
    argv = ["warpgauge", *sys.argv[1:]]
    try:
        code, dirs = distributed.run_repeated(
            chosen, lambda lr: default_services(chosen, device_index=lr, ui=ui), argv, info,
            repeat=repeat, out_root=out, resume=resume_dir,
        )  # fmt: skip
        if info.rank == 0 and len(dirs) > 1:
            from warpgauge.bench import stability

            path, summ = stability.write(out, dirs)
            print(
                f"stability: {summ['n_agree']} of {summ['n_ratios']} ratios agree within 10% -> {path}"
            )
    finally:
        torch.distributed.destroy_process_group()
    return code


@app.command()
def report(
    run: Annotated[Path, typer.Argument(help="Run directory.")],
    out: Annotated[
        Path | None,
        typer.Option(help="Write the report here instead of RUN/report/ (the run is untouched)."),
    ] = None,
) -> None:
    """Render report.md, report.html and figures from the run's artifacts (no GPU needed)."""
    from warpgauge import report as report_mod

    raise typer.Exit(report_mod.report_cli(run, out) or 0)


@app.command()
def validate(
    run: Annotated[Path, typer.Argument(help="Run directory.")],
    json_: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
) -> None:
    """Check schema, checksums and coverage against the run's config; exit 1 with the reasons."""
    from warpgauge import artifacts

    raise typer.Exit(artifacts.validate_cli(run, as_json=json_) or 0)


@app.command()
def compare(
    run_a: Annotated[Path, typer.Argument(help="First run directory (A, the reference).")],
    run_b: Annotated[Path, typer.Argument(help="Second run directory (B, judged against A).")],
    json_: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
    fail_above: Annotated[
        float | None,
        typer.Option(help="Exit 1 when a warpgauge provider is slower by more than PCT percent."),
    ] = None,
    min_effect: Annotated[
        float, typer.Option(help="Call changes under PCT percent 'same' even when significant.")
    ] = 0.0,
) -> None:
    """Compare two runs case by case, with verdicts from both runs' measured noise."""
    from warpgauge import compare as compare_mod

    code = compare_mod.compare_cli(
        run_a, run_b, as_json=json_, fail_above=fail_above, min_effect=min_effect / 100.0
    )
    raise typer.Exit(code)


@app.command("plans-report")
def plans_report(
    runs: Annotated[list[Path], typer.Argument(help="One or two plans-mode run directories.")],
    write: Annotated[
        Path | None, typer.Option(help="Write the markdown here (e.g. docs/plans.md).")
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the summary JSON.")] = None,
) -> None:
    """Regret of the plan rules over a plans-mode grid (and the run-to-run noise of two)."""
    from warpgauge.bench.modes import regret

    raise typer.Exit(regret.report_cli(runs, write, json_out))


@app.command("accuracy-report")
def accuracy_report(
    run: Annotated[Path, typer.Argument(help="An accuracy-mode run directory.")],
    write: Annotated[Path | None, typer.Option(help="Write the markdown here.")] = None,
) -> None:
    """Errors against FP64 beside PyTorch's own, and the tolerance probe's distribution."""
    from warpgauge.bench.modes import accuracy_report as rep

    raise typer.Exit(rep.report_cli(run, write))


@app.command("host-report")
def host_report(
    run: Annotated[Path, typer.Argument(help="A host-mode run directory.")],
    write: Annotated[Path | None, typer.Option(help="Write the markdown here.")] = None,
) -> None:
    """Host microseconds per eager call: warpgauge beside the cheapest PyTorch equivalent."""
    from warpgauge.bench.modes import host_report as rep

    raise typer.Exit(rep.report_cli(run, write))


@app.command()
def stability(
    runs: Annotated[list[Path], typer.Argument(help="Two or more runs of the same suite.")],
    out: Annotated[Path, typer.Option(help="Directory for the stability log.")] = Path("."),
) -> None:
    """Per-ratio spread across runs, and the fraction of ratios that agree within 10%."""
    from warpgauge.bench import stability as st

    if len(runs) < 2:
        raise _fail("warpgauge stability: give two or more run directories")
    path, summ = st.write(out, runs)
    print(st.markdown(summ, top=10))
    print(f"wrote {path}")


@app.command()
def goals(
    runs: Annotated[list[Path], typer.Argument(help="One or more run directories.")],
    band: Annotated[float, typer.Option(help="Level band of the never-slower check.")] = 0.03,
    json_: Annotated[Path | None, typer.Option("--json", help="Write every check here.")] = None,
    markdown: Annotated[Path | None, typer.Option(help="Write a markdown page here.")] = None,
    strict: Annotated[bool, typer.Option(help="Exit 1 when any check fails.")] = False,
    top: Annotated[int, typer.Option(help="Failed checks shown per run.")] = 40,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG of every case here.")] = None,
) -> None:
    """Every case of a run that misses an open issue's goal (ratios, % of the copy ceiling)."""
    from warpgauge import goals as goals_mod

    try:
        code = goals_mod.goals_cli(runs, band, json_, markdown, strict, top, plot)
    except ValueError as e:
        raise _fail(f"warpgauge goals: {e}") from None
    raise typer.Exit(code)


@app.command()
def export(
    run: Annotated[Path, typer.Argument(help="Run directory.")],
    format: Annotated[
        str | None, typer.Option(help="csv, parquet or json (default: from --out, else csv).")
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="File to write (default: stdout for csv and json).")
    ] = None,
) -> None:
    """Write the run in long form: one row per case x provider, statistics and derived rates."""
    from warpgauge import export as export_mod

    raise typer.Exit(export_mod.export_cli(run, format, out))


@app.command()
def providers(
    json_: Annotated[bool, typer.Option("--json", help="One JSON list on stdout.")] = False,
) -> None:
    """List every operator's providers and whether each is usable on this machine."""
    from warpgauge.bench.providers import describe

    rows = describe()
    if json_:
        import json

        print(json.dumps(rows, indent=2, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title="warpgauge providers (here)")
    for col in ("op", "provider", "label", "family", "baseline", "here"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["op"], r["name"], r["label"], r["family"], "yes" if r["baseline"] else "",
                  "available" if r["available"] else f"absent: {r['reason']}")  # fmt: skip
    Console(highlight=False).print(t)


@app.command()
def doctor(
    json_: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
    kernel: Annotated[
        bool, typer.Option(help="Run one tiny warpgauge kernel where a GPU or the interpreter is.")
    ] = True,
) -> None:
    """What this machine offers (GPU, driver, torch, triton, peers, tools), each with the fix."""
    from warpgauge import doctor as doctor_mod

    raise typer.Exit(doctor_mod.doctor_cli(as_json=json_, run_kernel=kernel))


_PASS = {"allow_extra_args": True, "ignore_unknown_options": True}


@app.command("roofline", context_settings=_PASS, add_help_option=False)
def roofline_cmd(ctx: typer.Context) -> None:
    """Throughput vs intensity under the run's measured roofs (`roofline --help`)."""
    from warpgauge.roofline.cli import main as roofline_main

    raise typer.Exit(roofline_main(list(ctx.args)))


@app.command("profile", context_settings=_PASS, add_help_option=False)
def profile_cmd(ctx: typer.Context) -> None:
    """Nsight Compute metrics and the byte-model check (`profile --help`)."""
    from warpgauge.profile.cli import main as profile_main

    raise typer.Exit(profile_main(list(ctx.args)))


@app.command("experiment", context_settings=_PASS, add_help_option=False)
def experiment_cmd(ctx: typer.Context) -> None:
    """The experiments behind the design choices (`experiment --help`)."""
    from warpgauge.experiments.cli import main as experiment_main

    raise typer.Exit(experiment_main(list(ctx.args)))


def _add_groups() -> None:
    from warpgauge.artifacts.cli import app as artifacts_app

    app.add_typer(artifacts_app, name="artifacts")


_add_groups()


@app.command(
    "cuda-softmax",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def cuda_softmax(ctx: typer.Context) -> None:
    """The CUDA softmax program; every argument is passed to it (try `cuda-softmax --help`)."""
    raise typer.Exit(_cuda_softmax(list(ctx.args)))


def _cuda_softmax(argv: list[str]) -> int:
    from warpgauge import cuda_softmax as prog

    return int(prog.main(argv) or 0)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args and args[0] == "cuda-softmax":
            sys.exit(_cuda_softmax(args[1:]))
        app(args=args, prog_name="warpgauge")
    except KeyboardInterrupt:
        print("warpgauge: interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
