"""Bad course and offers files: one clear message naming file, line or field, exit code 2, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"

GOOD = (REPO / "examples" / "course-2016.toml").read_text()


def run_plan(cli, tmp_path, text, *extra):
    path = tmp_path / "course.toml"
    path.write_text(text)
    r = cli("plan", path, *extra)
    assert "Traceback" not in r.err
    return r, path


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("participants = 16\n[schedule\nstart = 2016-06-06", "malformed TOML"),
        (GOOD.replace("participants = 16", "participants = 0"), "field 'participants'"),
        (GOOD.replace("participants = 16", "participants = -3"), "greater than 0"),
        (GOOD.replace("days = 15", "days = 15\nend = 2016-06-01"), "'days' = 15 from 2016-06-06 ends 2016-06-20"),
        (GOOD.replace("days = 15", "end = 2016-06-01"), "end 2016-06-01 is before start 2016-06-06"),
        (GOOD.replace("cuda = true", "cuda = true\ngpu_memroy = 4"), "unknown field"),
        (GOOD.replace('guest_os = "linux"', 'guest_os = "beos"'), "needs.guest_os"),
        (GOOD.replace("aws:g2.2xlarge", "aws:g2.2xlarg"), "unknown offer id 'aws:g2.2xlarg'. Did you mean"),
        (GOOD.replace("min_gpu_memory_gb = 4", "min_gpu_memory_gb = 80"), "no offer can seat group"),
        (GOOD.replace("days = 15", 'days = 15\nhours = "09:00-09:00"'), "a session needs a length"),
    ],
)
def test_bad_course_files(cli, tmp_path, text, expected):
    r, path = run_plan(cli, tmp_path, text)
    assert r.code == 2
    assert expected in r.err
    assert str(path) in r.err
    assert "To fix:" in r.err


def test_missing_course_file(cli, tmp_path):
    r = cli("plan", tmp_path / "nope.toml")
    assert r.code == 2
    assert "file not found" in r.err


def test_offers_file_with_unknown_gpu(cli, tmp_path):
    offers = tmp_path / "offers.toml"
    offers.write_text(
        'schema_version = 1\n[[offer]]\nid = "x:y"\nprovider = "x"\nkind = "cloud"\ninstance_type = "y"\n'
        'gpu = "M61"\ngpu_count = 1\nvcpus = 4\nram_gb = 16\nprice_usd = 1\nbilling = "per-hour"\n'
        'source = "test"\nas_of = 2026-01-01\n'
    )
    r, _ = run_plan(cli, tmp_path, GOOD, "--offers", offers)
    assert r.code == 2
    assert "offer[0]" in r.err and "unknown GPU model 'M61'" in r.err and "M60" in r.err


def test_offers_import_bad_files(cli, tmp_path):
    bad = tmp_path / "vms.csv"
    bad.write_text("a,b\n1,2\n")
    r = cli("offers", "import", bad, "--provider", "aws")
    assert r.code == 2 and "not a SkyPilot vms.csv" in r.err
    r = cli("offers", "import", FIXTURES / "aws_v8_vms_excerpt.csv", "--provider", "awz")
    assert r.code == 2 and "unknown provider 'awz'. Did you mean aws" in r.err
    broken = tmp_path / "broken.csv"
    broken.write_text("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region\nx,T4,one,4,16,1,r\n")
    r = cli("offers", "import", broken, "--provider", "aws")
    assert r.code == 2 and f"{broken}:2" in r.err and "AcceleratorCount is not a number" in r.err


def test_bad_flags(cli):
    r = cli("plan", REPO / "examples" / "course-2016.toml", "--format", "xml")
    assert r.code == 2
    r = cli("plan", REPO / "examples" / "course-2016.toml", "--skypilot", "no-equals-sign")
    assert r.code == 2 and "PROVIDER=PATH" in r.err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # strict types: no bool → int, no str → bool; the line of the key is named
        (GOOD.replace("participants = 16", "participants = true"), ":8: field 'participants'"),
        (GOOD.replace("cuda = true", 'cuda = "no"'), ":12: field 'needs.cuda'"),
        (GOOD.replace("min_gpu_memory_gb = 4", "min_gpu_memory_gb = true"), "field 'needs.min_gpu_memory_gb'"),
        # no hang: caps on course length, with the reason
        (GOOD.replace("days = 15", "days = 3000000"), "less than or equal to 1096"),
        (GOOD.replace("days = 15", "end = 2036-06-06"), "gpuseat plans courses of at most 1096 days"),
        # hours but only weekend dates: no session (was a ZeroDivisionError)
        (
            GOOD.replace("start = 2016-06-06", "start = 2016-06-04").replace(
                "days = 15", 'days = 2\nhours = "09:00-17:00"'
            ),
            "no date from 2016-06-04 to 2016-06-05 falls on mon, tue, wed, thu, fri",
        ),
        (GOOD.replace("participants = 16", "participants = 16\n[[group]]\ncount = 2"), "give either 'participants'"),
        (GOOD.replace("participants = 16", "participants = 1e300"), "too large"),
        (GOOD.replace("participants = 16", "participants = 200000"), ":8: field 'participants'"),
    ],
)
def test_strict_and_bounded_course_files(cli, tmp_path, text, expected):
    r, path = run_plan(cli, tmp_path, text)
    assert r.code == 2, r.out
    assert expected in r.err
    assert str(path) in r.err
    assert "{" not in r.err  # never the whole course dict as "got …"


def test_whole_model_error_says_how_to_fix(cli, tmp_path):
    r, _ = run_plan(cli, tmp_path, GOOD.replace("participants = 16", ""))
    assert r.code == 2
    assert "give 'participants = N' (with [needs]) or one or more [[group]] tables" in r.err
    assert "To fix: correct the file as the message says" in r.err


def test_a_byte_order_mark_is_accepted(cli, tmp_path):
    path = tmp_path / "course.toml"
    path.write_bytes("\ufeff".encode() + GOOD.encode())
    r = cli("plan", path, "--format", "json")
    assert r.code == 0, r.err


def test_infinite_or_huge_prices_in_an_offers_file(cli, tmp_path):
    for value in ("inf", "nan", "1e309", "9223372036854775808"):
        offers = tmp_path / "offers.toml"
        offers.write_text(
            'schema_version = 1\n[[offer]]\nid = "x:y"\nprovider = "x"\nkind = "cloud"\ninstance_type = "y"\n'
            f'gpu = "T4"\ngpu_count = 1\nvcpus = 4\nram_gb = 16\nprice_usd = {value}\nbilling = "per-hour"\n'
            'source = "test"\nas_of = 2026-01-01\n'
        )
        r, _ = run_plan(cli, tmp_path, GOOD, "--offers", offers)
        assert r.code == 2, (value, r.out)
        assert str(offers) in r.err and "price_usd" in r.err


def test_offers_file_errors_name_the_line(cli, tmp_path):
    offers = tmp_path / "offers.toml"
    offers.write_text(
        'schema_version = 1\n[[offer]]\nid = "x:y"\nprovider = "x"\nkind = "cloud"\ninstance_type = "y"\n'
        'gpu = "T4"\ngpu_count = 1\nvcpus = 4\nram_gb = 16\nprice_usd = 1\nbilling = "per-hour"\n'
        'stoppable = "yes"\nsource = "test"\nas_of = 2026-01-01\n'
    )
    r, _ = run_plan(cli, tmp_path, GOOD, "--offers", offers)
    assert r.code == 2
    assert f"{offers}:13: field 'offer[0].stoppable'" in r.err


def test_offers_left_out_by_the_course_globs_are_named(cli, tmp_path):
    offers = tmp_path / "offers.toml"
    offers.write_text(
        'schema_version = 1\n[[offer]]\nid = "x:y"\nprovider = "x"\nkind = "cloud"\ninstance_type = "y"\n'
        'gpu = "T4"\ngpu_count = 1\nvcpus = 4\nram_gb = 16\nprice_usd = 0.1\nbilling = "per-hour"\n'
        'source = "test"\nas_of = 2016-01-01\n'
    )
    r, _ = run_plan(cli, tmp_path, GOOD, "--offers", offers)
    assert r.code == 0
    assert "1 offer(s) from --offers/--skypilot are not considered" in r.err and "x:y" in r.err


def test_library_callers_get_catchable_errors(tmp_path):
    from datetime import date

    from gpuseat.catalog.bundle import load_catalog
    from gpuseat.core.course import Course
    from gpuseat.core.plan import plan
    from gpuseat.errors import Infeasible, InputError, NoOfferFits

    catalog = load_catalog()
    g4dn = next(o for o in catalog.offers if o.id == "aws:g4dn.xlarge").model_copy(update={"available": 2})
    course = Course.model_validate({"participants": 3, "schedule": {"start": date(2026, 3, 2), "days": 1}})
    with pytest.raises(Infeasible) as exc:
        plan(course, [g4dn], catalog=catalog, where="c.toml")
    assert exc.value.where == "c.toml" and "availability" in exc.value.what and isinstance(exc.value, InputError)
    big = Course.model_validate(
        {"participants": 3, "needs": {"min_gpu_memory_gb": 500}, "schedule": {"start": date(2026, 3, 2), "days": 1}}
    )
    with pytest.raises(NoOfferFits) as exc2:
        plan(big, [g4dn], catalog=catalog)
    assert exc2.value.what == (
        "no offer can seat group 'participants' (needs ≥ 500 GB GPU memory, linux, partitioned); "
        "1 offers were considered: 16 GB GPU memory < 500 GB needed (1 offer)"
    )
