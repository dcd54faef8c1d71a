"""``gmpo-plugins bench``: the grid it measures, its JSON, its usage errors, and the
memory measurement behind the "peak extra memory" column."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from gmpo_plugins.bench import measure, variants
from gmpo_plugins.cli.main import main
from gmpo_plugins.core.kernels import FUSED_LOSSES
from gmpo_plugins.core.registry import get_loss, list_losses

VERL = importlib.util.find_spec("verl") is not None


def test_bench_grid_and_json(tmp_path, capsys):
    path = tmp_path / "bench.json"
    rc = main(["bench", "--losses", "gmpo,grpo", "--shapes", "4x32,8x64", "--dtypes", "fp32,bf16",
               "--repeats", "2", "--json", str(path)])
    assert rc == 0
    result = json.loads(path.read_text())
    rows = result["rows"]
    seen = {(r["loss"], r["variant"], r["dtype"], r["batch"], r["length"]) for r in rows}
    for dtype in ("fp32", "bf16"):
        for b, t in ((4, 32), (8, 64)):
            assert ("(floor)", "floor", dtype, b, t) in seen
            assert ("(floor)", "floor, preallocated out", dtype, b, t) in seen
            assert ("gmpo", "fused", dtype, b, t) in seen
            assert ("gmpo", "eager", dtype, b, t) in seen
            assert ("grpo", "fused", dtype, b, t) in seen and ("grpo", "eager", dtype, b, t) in seen
            assert (("gmpo", "verl geo_mean", dtype, b, t) in seen) == VERL
    for row in rows:
        assert row["tokens"] == row["batch"] * row["length"] and row["median_ms"] > 0
        assert row["ns_per_token"] == pytest.approx(row["median_ms"] * 1e6 / row["tokens"])
        assert row["cpu_ms"] is not None and row["cpu_ms"] >= 0  # process CPU time on CPU
        if row["variant"] == "floor":
            assert row["x_floor"] == 1.0
        if row["variant"] == "eager":
            assert row["x_eager"] == 1.0
    assert {(s["loss"], s["variant"], s["dtype"]) for s in result["scaling"]} >= {("gmpo", "fused", "fp32")}
    assert all(s["max_over_min"] >= 1.0 for s in result["scaling"])
    assert [t["target"].split(":")[0] for t in result["targets"]][:2] == ["CPU gmpo fp32 8x64"] * 2
    assert any(t["target"].startswith("(stricter)") for t in result["targets"])
    assert VERL or any("verl not importable" in note for note in result["notes"])
    out = capsys.readouterr().out
    assert "gmpo-plugins bench" in out and "time per token" in out


def test_loss_without_fused_path(capsys):
    """A plugin loss (no impl switch) is timed once, labelled as such, without an eager ratio."""
    names = [spec.name for spec in list_losses() if spec.name not in FUSED_LOSSES]
    if not names:
        pytest.skip("no registered loss without a fused path (tests/plugins/example_plugin not installed)")
    assert main(["bench", "--losses", names[0], "--shapes", "2x16", "--dtypes", "fp32", "--repeats", "1",
                 "--markdown"]) == 0
    assert f"| {names[0]} | registry (no fused path) | fp32 | 2x16 |" in capsys.readouterr().out


def test_markdown_output(capsys):
    assert main(["bench", "--losses", "gspo", "--shapes", "2x16", "--dtypes", "fp64", "--repeats", "1",
                 "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "| loss | variant | dtype | B x T |" in out
    assert "| gspo | fused | fp64 | 2x16 |" in out and "| gspo | eager | fp64 | 2x16 |" in out


@pytest.mark.parametrize(
    "argv, option",
    [
        (["--shapes", "64x"], "--shapes"),
        (["--shapes", "0x8"], "--shapes"),
        (["--dtypes", "fp8"], "--dtypes"),
        (["--losses", "gmpp"], "--losses"),
        (["--repeats", "0"], "--repeats"),
        (["--repeats", "two"], "--repeats"),
        (["--threads", "-1"], "--threads"),
        (["--device", "tpu"], "--device"),
        (["--json", "/nonexistent-dir/x.json"], "--json"),
    ],
)
def test_bad_arguments_one_line_exit_2(argv, option, capsys):
    assert main(["bench", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gmpo-plugins bench: error: " + option)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without CUDA")
def test_cuda_unavailable_is_a_usage_error(capsys):
    assert main(["bench", "--device", "cuda"]) == 2
    assert "cuda" in capsys.readouterr().err


def test_memory_measurement_sees_the_difference():
    """At 64x4096 fp32 the fused gmpo keeps about 1 byte/token beyond its gradient (the
    active mask), the eager formulation several float (B, T) temporaries."""
    case = variants.make_case(64, 4096, torch.float32, torch.device("cpu"))
    tokens, grad_bytes = 64 * 4096, 64 * 4096 * 4
    spec = get_loss("gmpo")
    fused_call, eager_call = variants.fused(spec, case), variants.eager(spec, case)
    fused_call()  # a gradient from an earlier call is dropped by reset, outside the measurement
    fused = measure.peak_extra_bytes(fused_call, torch.device("cpu"), grad_bytes, reset=case.clear_grad)
    eager_call()
    eager = measure.peak_extra_bytes(eager_call, torch.device("cpu"), grad_bytes, reset=case.clear_grad)
    floor = measure.peak_extra_bytes(variants.floor(case), torch.device("cpu"), grad_bytes)
    assert floor == 0
    assert measure.peak_extra_bytes(variants.floor_preallocated(case), torch.device("cpu"), 0) == 0
    assert tokens <= fused <= tokens + 1024 * 64
    assert eager > 8 * tokens
