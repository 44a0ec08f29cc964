"""Compacted case files (``cases/<case-file>.json.gz``) and ``warpgauge artifacts compact``.

CPU only, from the synthetic fixture run (tests/fixtures/run-synthetic, made with the public
writers) and one committed host-mode run: compaction is lossless and deterministic, every reader
gives the same answer before and after, validation checks the stored bytes and the decompressed
JSON, and the command refuses what does not validate.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from warpgauge import artifacts as A
from warpgauge import compare as C
from warpgauge import export as X
from warpgauge import report as R
from warpgauge.artifacts.compact import compact_run, find_runs
from warpgauge.htmldoc import to_html, to_markdown

FIXTURE_RUN = Path(__file__).parent / "fixtures" / "run-synthetic"
REPO = Path(__file__).resolve().parents[1]
HOST_RUN = REPO / "results" / "20261201-144638-host"
SOFTMAX_COLD = "cases/softmax__bfloat16__16384x4096__cold.json"


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _expanded(src: Path, dst: Path) -> Path:
    """A copy of ``src`` with every case file in plain form (what the bench wrote)."""
    shutil.copytree(src, dst)
    for gz in list((dst / "cases").glob("*.json.gz")):
        A.atomic_write_bytes(gz.with_name(gz.name[: -len(".gz")]), A.read_bytes(gz))
        gz.unlink()
    A.write_manifest(dst)
    return dst


def _snapshot(run_dir: Path) -> dict:
    return {
        rel: ((run_dir / rel).read_bytes(), (run_dir / rel).stat().st_mtime_ns)
        for rel in A.list_files(run_dir)
    }


def _has(problems: list[str], *needles: str) -> bool:
    return any(all(n in p for n in needles) for p in problems)


@pytest.fixture
def run_dir(tmp_path) -> Path:
    return _copy(FIXTURE_RUN, tmp_path / "run")


# ------------------------------------------------------------------------------------ the form


def test_gzip_bytes_are_deterministic_and_lossless():
    data = (FIXTURE_RUN / SOFTMAX_COLD).read_bytes()
    packed = A.gzip_bytes(data)
    assert packed == A.gzip_bytes(bytes(data))  # same JSON, same bytes
    assert packed[:2] == b"\x1f\x8b" and packed[4:8] == b"\0\0\0\0"  # gzip, mtime 0
    assert packed[3] & 0x08 == 0  # no file name stored
    assert gzip.decompress(packed) == data and len(packed) < len(data) / 2


def test_compaction_round_trips_the_run(run_dir):
    plain = {p.name: p.read_bytes() for p in (run_dir / "cases").glob("*.json")}
    loaded_before = A.load_run(run_dir)
    assert len(plain) == 10 and A.validate_run(run_dir) == []

    done = compact_run(run_dir)

    assert done.compacted == 10 and done.case_files == 10
    assert done.bytes_after < done.bytes_before
    names = sorted(p.name for p in (run_dir / "cases").iterdir())
    assert names == sorted(n + ".gz" for n in plain)  # no .json left
    for name, data in plain.items():
        stored = (run_dir / "cases" / (name + ".gz")).read_bytes()
        assert stored == A.gzip_bytes(data) and gzip.decompress(stored) == data
    files = A.read_json(run_dir / A.MANIFEST_FILE)["files"]
    for name in plain:
        rel = f"cases/{name}"
        assert rel not in files
        entry = files[rel + ".gz"]
        assert entry["sha256"] == A.sha256_file(run_dir / (rel + ".gz"))  # the stored bytes
        assert entry["bytes"] == (run_dir / (rel + ".gz")).stat().st_size
    assert A.validate_run(run_dir) == []
    after = A.check_run(run_dir)
    assert after.case_files == 10
    loaded_after = A.load_run(run_dir)
    assert loaded_after.cases == loaded_before.cases and loaded_after.run == loaded_before.run


def test_compaction_gives_the_same_bytes_every_time(tmp_path):
    a = _copy(FIXTURE_RUN, tmp_path / "a")
    b = _copy(FIXTURE_RUN, tmp_path / "b")
    compact_run(a)
    compact_run(b)
    assert {r: (a / r).read_bytes() for r in A.list_files(a)} == {
        r: (b / r).read_bytes() for r in A.list_files(b)
    }


def test_a_compacted_run_is_left_alone(run_dir):
    compact_run(run_dir)
    before = _snapshot(run_dir)
    again = compact_run(run_dir)
    assert again.compacted == 0 and again.case_files == 10
    assert again.bytes_before == again.bytes_after
    assert _snapshot(run_dir) == before  # not one byte or mtime changed


# ------------------------------------------------------------------------------------ validation


def test_a_tampered_gz_case_fails_validation_naming_it(run_dir):
    compact_run(run_dir)
    rel = SOFTMAX_COLD + ".gz"
    case = A.read_json(run_dir / rel)
    case["providers"][0]["setup_s"] = 123.0  # schema-valid, but not what was measured
    (run_dir / rel).write_bytes(A.gzip_bytes(A.dumps(case).encode()))
    problems = A.validate_run(run_dir)
    assert _has(problems, rel, "checksum mismatch")
    assert not _has(problems, "cases/gemm__")  # only the tampered file is named


def test_a_truncated_gz_case_is_named_as_not_gzip(run_dir):
    compact_run(run_dir)
    rel = SOFTMAX_COLD + ".gz"
    data = (run_dir / rel).read_bytes()
    (run_dir / rel).write_bytes(data[: len(data) // 2])
    problems = A.validate_run(run_dir)
    assert _has(problems, rel, "checksum mismatch", "truncated")
    assert _has(problems, rel, "corrupted or truncated: not valid gzip")
    with pytest.raises(ValueError, match="not valid gzip"):
        A.load_run(run_dir)


def test_the_decompressed_json_is_schema_checked(run_dir):
    compact_run(run_dir)
    rel = SOFTMAX_COLD + ".gz"
    case = A.read_json(run_dir / rel)
    del case["lane"]
    (run_dir / rel).write_bytes(A.gzip_bytes(A.dumps(case).encode()))
    A.write_manifest(run_dir)  # checksums renewed: only the content can be wrong now
    problems = A.validate_run(run_dir)
    assert _has(problems, rel, "lane")
    assert not _has(problems, "checksum")


def test_a_case_in_both_forms_is_an_error_naming_both(run_dir):
    data = (run_dir / SOFTMAX_COLD).read_bytes()
    compact_run(run_dir)
    (run_dir / SOFTMAX_COLD).write_bytes(data)  # the plain form back, listed too
    A.write_manifest(run_dir)
    problems = A.validate_run(run_dir)
    assert _has(problems, SOFTMAX_COLD + " and " + SOFTMAX_COLD + ".gz", "both forms")
    assert not _has(problems, "also in")  # one problem for the pair, not two
    with pytest.raises(A.ArtifactError, match="does not validate"):
        compact_run(run_dir)  # both listed: compact does not pick one


def test_a_gz_file_with_the_wrong_name_or_suffix_is_named(run_dir):
    compact_run(run_dir)
    src = run_dir / (SOFTMAX_COLD + ".gz")
    src.rename(run_dir / "cases" / "renamed.json.gz")
    (run_dir / "cases" / "x.gz").write_bytes(A.gzip_bytes(b"{}"))
    A.write_manifest(run_dir)
    problems = A.validate_run(run_dir)
    assert _has(problems, "cases/renamed.json.gz", "whose file is")
    assert _has(problems, "cases/x.gz", "not a case file")


# ------------------------------------------------------------------------------------ compact


def test_compact_refuses_a_run_that_does_not_validate_and_changes_nothing(run_dir):
    path = run_dir / SOFTMAX_COLD
    path.write_bytes(path.read_bytes().replace(b'"cold"', b'"warm"', 1))
    before = _snapshot(run_dir)
    with pytest.raises(A.ArtifactError, match="does not validate") as e:
        compact_run(run_dir)
    assert _has(e.value.problems, SOFTMAX_COLD, "checksum mismatch")
    assert _snapshot(run_dir) == before


def test_compact_refuses_a_run_whose_files_an_enclosing_manifest_lists(tmp_path):
    outer = tmp_path / "outer"
    run = _copy(FIXTURE_RUN, outer / "run")
    files = {f"run/{SOFTMAX_COLD}": {"sha256": A.sha256_file(run / SOFTMAX_COLD), "bytes": 1}}
    A.atomic_write_json(outer / A.MANIFEST_FILE, {"files": files})
    before = _snapshot(run)
    with pytest.raises(A.ArtifactError, match="compact .*outer instead"):
        compact_run(run)
    assert _snapshot(run) == before


@pytest.mark.parametrize("killed", ["before the manifest", "before the plain files went"])
def test_a_compaction_killed_midway_is_finished_by_the_next(run_dir, killed):
    plain = sorted((run_dir / "cases").glob("*.json"))[:3]
    for p in plain:  # the first step of compact_run for three files
        A.atomic_write_bytes(p.with_name(p.name + ".gz"), A.gzip_bytes(p.read_bytes()))
    if killed == "before the plain files went":
        rels = [f"cases/{p.name}" for p in plain]
        A.update_manifest(run_dir, [r + ".gz" for r in rels], remove=rels)
    assert _has(A.validate_run(run_dir), "both forms")
    done = compact_run(run_dir)
    assert done.compacted == (10 if killed == "before the manifest" else 7)
    assert A.validate_run(run_dir) == [] and not list((run_dir / "cases").glob("*.json"))


def test_find_runs_walks_a_parent_folder_without_entering_runs(tmp_path):
    a = _copy(FIXTURE_RUN, tmp_path / "p" / "a")
    b = _copy(FIXTURE_RUN, tmp_path / "p" / "deeper" / "b")
    _copy(FIXTURE_RUN, a / "ranks" / "r0")  # part of run a, not a run of its own here
    assert find_runs([tmp_path / "p"]) == [a, b]
    assert find_runs([a, tmp_path / "p"]) == [a, b]
    with pytest.raises(A.ArtifactError, match="no run directory"):
        find_runs([tmp_path / "p" / "a" / "cases"])


def test_compact_takes_the_rank_runs_along(tmp_path):
    run = _copy(FIXTURE_RUN, tmp_path / "run")
    rank = _copy(FIXTURE_RUN, run / "ranks" / "r0")
    A.write_manifest(run)  # the run's manifest lists the rank run's files
    assert A.validate_run(run) == []
    done = compact_run(run)
    assert done.compacted == 20
    assert not list(rank.glob("cases/*.json")) and len(list(rank.glob("cases/*.json.gz"))) == 10
    assert A.validate_run(run) == [] and A.validate_run(rank) == []


def test_cli_compacts_a_folder_of_runs_and_reports_bytes(tmp_path):
    from warpgauge.cli import app

    good = _copy(FIXTURE_RUN, tmp_path / "p" / "good")
    bad = _copy(FIXTURE_RUN, tmp_path / "p" / "bad")
    (bad / SOFTMAX_COLD).unlink()
    cli = CliRunner()
    res = cli.invoke(app, ["artifacts", "compact", str(tmp_path / "p")], terminal_width=200)
    assert res.exit_code == 1, res.output
    assert "before" in res.output and "after" in res.output and "REFUSED" in res.output
    assert SOFTMAX_COLD in res.output  # the reason names the file
    assert len(list(good.glob("cases/*.json.gz"))) == 10 and not list(bad.glob("cases/*.gz"))
    res = cli.invoke(app, ["artifacts", "compact", str(good)], terminal_width=200)
    assert res.exit_code == 0 and "already compact" in res.output
    res = cli.invoke(app, ["artifacts", "compact", str(tmp_path / "nothing")])
    assert res.exit_code == 2 and "not a directory" in res.output


# ------------------------------------------------------------------------------------ readers


def _report_text(run_dir: Path, out: Path) -> tuple[str, str]:
    run = A.load_run(run_dir)
    blocks = R.build_blocks(run, A.validate_run(run_dir, include_report=False), {}, (None, None))
    return to_markdown(blocks, out), to_html(blocks)


def test_report_compare_and_export_say_the_same_after_compaction(run_dir, tmp_path):
    md0, html0 = _report_text(run_dir, tmp_path)
    cmp0 = C.format_comparison(C.compare_runs(FIXTURE_RUN, run_dir))
    rows0 = X.records(run_dir)
    compact_run(run_dir)
    md1, html1 = _report_text(run_dir, tmp_path)
    assert "| 2.60× | torch.compile |" in md1  # the fixture's cases are in the report
    assert md1 == md0 and html1 == html0
    assert C.format_comparison(C.compare_runs(FIXTURE_RUN, run_dir)) == cmp0
    assert "softmax/bfloat16/16384x4096/cold" in cmp0
    assert X.records(run_dir) == rows0 and len(rows0) > 10


def test_host_report_of_a_committed_run_is_the_same_in_both_forms(tmp_path):
    from warpgauge.bench.modes import host_report

    if not HOST_RUN.is_dir():
        pytest.skip("the committed host run is not in this checkout")
    run = _expanded(HOST_RUN, tmp_path / HOST_RUN.name)  # the report names the directory
    assert len(list(run.glob("cases/*.json"))) == 6
    text = host_report.markdown(run)
    assert compact_run(run).compacted == 6
    assert "| add/bfloat16/" in text and host_report.markdown(run) == text


def test_finish_run_resume_and_write_case_see_the_compacted_cases(run_dir):
    from warpgauge.bench.resume import repair_run_dir

    compact_run(run_dir)
    run = A.finish_run(run_dir, "complete", finished_at="2026-12-01T00:00:00.000Z")
    assert run["status"] == "complete" and len(run["finished_cases"]) == 10
    assert A.find_case(run_dir, "softmax/bfloat16/16384x4096/cold").name.endswith(".json.gz")

    rel = SOFTMAX_COLD + ".gz"  # a kill left a valid case file unlisted: resume lists it
    A.update_manifest(run_dir, remove=[rel])
    said = []
    repair_run_dir(A, type("UI", (), {"info": lambda self, m: said.append(m)})(), run_dir)
    assert (run_dir / rel).is_file() and _has(said, rel, "listed")
    assert A.validate_run(run_dir) == []

    case = A.read_json(run_dir / rel)  # measured again: the plain form replaces the .json.gz
    A.write_case(run_dir, case)
    assert (run_dir / SOFTMAX_COLD).is_file() and not (run_dir / rel).exists()
    assert A.validate_run(run_dir) == []
