"""The report folder: no silent overwrite, --force, the INCOMPLETE marker, Ctrl-C."""

import hashlib
import os
from pathlib import Path

import pytest

from gmpo_plugins.cli.main import main


def digests(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def quick(model: Path, out: Path, *extra: str) -> list[str]:
    return ["compare", "--seeds", "1", "--steps", "1", "--losses", "gmpo", "--model", str(model), "--out", str(out),
            *extra]  # fmt: skip


@pytest.fixture
def model(two_step_report) -> Path:
    return two_step_report / "model-init" / "seed-0"


def test_previous_report_is_refused_and_left_unchanged(model, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(quick(model, out)) == 0
    (out / "my-notes.txt").write_text("the user's own file")
    before = digests(out)
    capsys.readouterr()
    assert main(quick(model, out)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "already holds a report" in lines[0] and "--force" in lines[0], lines
    assert digests(out) == before


@pytest.mark.parametrize("name", ["report.md", "reward.png", "logs", "INCOMPLETE"])
def test_any_entry_it_would_write_is_refused(tmp_path, capsys, name):
    out = tmp_path / "out"
    out.mkdir()
    if name == "logs":
        (out / name).mkdir()
        (out / name / "x.log").write_text("user data")
    else:
        (out / name).write_text("user data")
    before = digests(out)
    assert main(["compare", "--out", str(out)]) == 2  # refused before the warm-up
    assert "already holds a report" in capsys.readouterr().err
    assert digests(out) == before


def test_force_replaces_only_the_report(model, tmp_path):
    out = tmp_path / "out"
    assert main(quick(model, out)) == 0
    (out / "my-notes.txt").write_text("the user's own file")
    (out / "report.md").write_text("stale")
    assert main(quick(model, out, "--force")) == 0
    assert (out / "my-notes.txt").read_text() == "the user's own file"
    assert (out / "report.md").read_text().startswith("# gmpo-plugins compare")


def test_other_files_in_out_are_kept(model, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "data.csv").write_text("1,2\n")
    assert main(quick(model, out)) == 0
    assert (out / "data.csv").read_text() == "1,2\n" and (out / "report.md").is_file()


def test_ctrl_c_exits_130_marks_incomplete(model, tmp_path, capsys, monkeypatch):
    from gmpo_plugins.compare.report import writer

    def interrupt(path, record):
        raise KeyboardInterrupt

    monkeypatch.setattr(writer, "append_metrics", interrupt)
    out = tmp_path / "out"
    assert main(quick(model, out)) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err
    expected = f"gmpo-plugins compare: interrupted; {out} is incomplete (see {out / 'INCOMPLETE'})"
    assert err.strip().splitlines()[-1] == expected
    assert "did not finish" in (out / "INCOMPLETE").read_text() and not (out / "report.md").exists()


def test_ctrl_c_ends_the_framework_subprocess(model, tmp_path, capsys, monkeypatch):
    """A framework in another interpreter (a fake one that emits a record, then hangs) is
    terminated when the run is interrupted."""
    pid_file = tmp_path / "child.pid"
    fake = tmp_path / "python"
    fake.write_text(
        "#!/bin/sh\n"
        "case \"$*\" in *--check-losses*) echo 'GMPO_COMPARE_UNSUPPORTED []'; exit 0;; esac\n"
        f"echo $$ > {pid_file}\n"
        'echo \'GMPO_COMPARE_RECORD {"framework": "core", "loss_name": "gmpo", "seed": 0, "step": 0}\'\n'
        "exec sleep 300\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("GMPO_PLUGINS_PYTHON_CORE", str(fake))
    from gmpo_plugins.compare.report import writer

    def interrupt(path, record):
        raise KeyboardInterrupt

    monkeypatch.setattr(writer, "append_metrics", interrupt)
    assert main(quick(model, tmp_path / "out")) == 130
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # terminated and reaped


def test_unsupported_loss_in_a_subprocess_framework_is_a_usage_error(tmp_path, capsys, monkeypatch):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'GMPO_COMPARE_UNSUPPORTED [\"grpo\"]'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("GMPO_PLUGINS_PYTHON_CORE", str(fake))
    assert main(["compare", "--out", str(tmp_path / "out")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "does not support loss(es) ['grpo']" in lines[0]
    assert not (tmp_path / "out").exists()  # before the warm-up, nothing written
