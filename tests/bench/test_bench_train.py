"""Training Caffe's LeNet on real MNIST for a few iterations, through the library and the CLI."""

from __future__ import annotations

import json
import math

import pytest
import torch

from gpuseat.bench.lenet import LeNet, Trainer, device_tensors
from gpuseat.bench.results import BenchResult, recorded_results
from gpuseat.bench.run import BenchOptions, run_benchmark
from gpuseat.bench.workload import solver

from .conftest import has_cuda


def test_lenet_has_caffes_shape_and_xavier_init():
    model = LeNet().caffe_init(seed=7)
    assert sum(p.numel() for p in model.parameters()) == 431_080
    for layer in (model.conv1, model.conv2, model.ip1, model.ip2):
        bound = math.sqrt(3.0 / layer.weight[0].numel())
        assert layer.weight.abs().max() <= bound
        assert layer.weight.abs().max() > 0.9 * bound  # uniform over the whole range, not a narrower one
        assert torch.count_nonzero(layer.bias) == 0
    assert torch.equal(LeNet().caffe_init(seed=7).ip1.weight, model.ip1.weight)


def test_batches_follow_file_order_and_wrap_around(mnist):
    s = solver()
    x, y = device_tensors(mnist.test_images[:100], mnist.test_labels[:100], s.input_scale, torch.device("cpu"))
    trainer = Trainer(LeNet(), x, y, s, iterations=3)
    assert trainer.batch_index().tolist() == list(range(64))
    trainer.iteration.fill_(1)
    assert trainer.batch_index().tolist() == [*range(64, 100), *range(28)]
    assert x.max().item() == 255 / 256  # input × 0.00390625


def test_two_steps_follow_caffes_sgd(mnist):
    """diff = g + wd·w; V = m·V + lr_mult·rate·diff; w -= V — biases at 2× rate and decayed too."""
    s = solver()
    x, y = device_tensors(mnist.train_images[:128], mnist.train_labels[:128], s.input_scale, torch.device("cpu"))
    model = LeNet().caffe_init(seed=3)
    # Non-zero biases make the decay on biases visible.
    with torch.no_grad():
        for p in (model.conv1.bias, model.conv2.bias, model.ip1.bias, model.ip2.bias):
            p.fill_(0.05)
    ref = LeNet()
    ref.load_state_dict(model.state_dict())
    trainer = Trainer(model, x, y, s, iterations=2)
    trainer.run(2)

    velocity = {name: torch.zeros_like(p) for name, p in ref.named_parameters()}
    for it in range(2):
        batch = slice(64 * it, 64 * (it + 1))
        loss = torch.nn.functional.cross_entropy(ref(x[batch]), y[batch])
        grads = torch.autograd.grad(loss, list(ref.parameters()))
        rate = s.base_lr * (1 + s.gamma * it) ** -s.power
        with torch.no_grad():
            for (name, p), g in zip(ref.named_parameters(), grads, strict=True):
                mult = s.bias_lr_mult if name.endswith("bias") else 1.0
                velocity[name] = s.momentum * velocity[name] + mult * rate * (g + s.weight_decay * p)
                p -= velocity[name]
    for (name, p), q in zip(ref.named_parameters(), model.parameters(), strict=True):
        assert torch.allclose(p, q, rtol=1e-5, atol=1e-7), name
    assert trainer.losses[0].item() > 2.0  # ln(10) ≈ 2.30 at the start


def test_same_seed_same_result_and_warm_up_is_undone(mnist):
    options = BenchOptions(iterations=8, device="cpu", seed=5, warmup=2, threads=1)
    first = run_benchmark(options, mnist=mnist)
    second = run_benchmark(options.model_copy(update={"warmup": 0}), mnist=mnist)
    assert first.test_accuracy == second.test_accuracy
    assert first.test_loss == second.test_loss
    assert first.losses == second.losses


def test_cli_json_contract_and_store(cli, bench_env):
    r = cli("bench", "--device", "cpu", "--threads", "1", "--iterations", "30", "--format", "json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert out["iterations"] == 30
    assert out["seconds"] > 0 and out["iterations_per_second"] == pytest.approx(30 / out["seconds"])
    assert out["test_accuracy"] > 0.6  # chance is 0.1; after 30 iterations LeNet is well past it
    assert out["losses"][0][1] > out["test_loss"]
    assert out["device"]["kind"] == "cpu" and out["device"]["name"]
    assert {ref["name"] for ref in out["reference"]} == {
        "AWS g2.2xlarge (GRID K520)",
        "IBM bare metal (Tesla M60)",
    }
    for ref in out["reference"]:
        assert ref["speedup"] == pytest.approx(ref["seconds"] / out["seconds"])
    (stored,) = recorded_results()
    assert (stored.iterations, stored.gpu_model, stored.seconds) == (30, None, out["seconds"])
    assert out["schema_version"] == 1 and out["tf32"] is False
    body = {k: v for k, v in out.items() if k != "schema_version"}
    assert BenchResult.model_validate(body).to_dict() == out  # the CLI prints the result's to_dict()
    assert all("21 test passes" in ref["note"] for ref in out["reference"])


def test_cli_caffe_tests_table(cli, bench_env):
    r = cli("bench", "-d", "cpu", "--threads", "1", "-n", "10", "--caffe-tests", "--no-record")
    assert r.code == 0, r.err
    assert "test_seconds (Caffe schedule)" in r.out
    assert "this seat:" in r.out and "an M60" in r.out
    assert not (bench_env / "bench-results.jsonl").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-n", "0"], "iterations must be between 1 and"),
        (["-n", "-3"], "iterations must be between 1 and"),
        (["-n", "100000000000"], "iterations must be between 1 and"),
        (["-d", "tpu"], "unknown device 'tpu'"),
        (["-d", "cpu", "--threads", "0"], "threads must be positive"),
        (["-d", "cpu", "--data", "/nonexistent/mnist"], "not a folder"),
    ],
)
def test_bad_input_exits_2(cli, bench_env, args, message):
    r = cli("bench", *args)
    assert r.code == 2
    assert message in r.err and "To fix:" in r.err
    assert "Traceback" not in r.err


@pytest.mark.skipif(has_cuda(), reason="checks the message on a machine without CUDA")
def test_cuda_unavailable_exits_2(cli, bench_env):
    r = cli("bench", "-d", "cuda", "-n", "5")
    assert r.code == 2
    assert "CUDA" in r.err


@pytest.mark.gpu
@pytest.mark.skipif(not has_cuda(), reason="needs an NVIDIA GPU")
def test_cuda_graph_run_learns_and_matches_cpu_start(mnist):
    result = run_benchmark(BenchOptions(iterations=300, device="cuda"), mnist=mnist)
    assert result.device.kind == "cuda" and result.device.cuda
    assert result.test_accuracy > 0.95
    cpu = run_benchmark(BenchOptions(iterations=1, device="cpu", threads=1), mnist=mnist)
    assert result.losses[0][1] == pytest.approx(cpu.losses[0][1], rel=1e-4)  # same init, same first batch


@pytest.mark.gpu
@pytest.mark.skipif(not has_cuda(), reason="needs an NVIDIA GPU")
def test_all_seats_on_a_gpu_machine(cli, bench_env):
    r = cli("bench", "--all-seats", "-n", "200", "--format", "json")
    out = json.loads(r.out)
    assert out["seats"]
    assert r.code == (1 if out["findings"] else 0)


def test_benchmark_leaves_ieee_denormals_to_the_caller(mnist):
    """The CPU trainer flushes denormals while it runs; the process gets IEEE arithmetic back after."""
    run_benchmark(BenchOptions(iterations=2, device="cpu", seed=1, warmup=0, threads=1), mnist=mnist)
    assert torch.tensor([1e-40], dtype=torch.float32).item() != 0.0
    assert 5e-324 * 1.0 > 0.0


def test_tf32_is_off_during_the_run_recorded_and_restored(mnist):
    """Issue 15 item 12: TF32 (PyTorch's default for cuDNN convolutions) is off while the benchmark
    runs, the result records it, and the caller's setting is given back."""
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        result = run_benchmark(BenchOptions(iterations=2, device="cpu", warmup=0, threads=1), mnist=mnist)
        assert result.tf32 is False
        assert result.to_dict()["tf32"] is False
        assert torch.backends.cudnn.allow_tf32 is True and torch.backends.cuda.matmul.allow_tf32 is True
    finally:
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cuda.matmul.allow_tf32 = False


@pytest.mark.gpu
@pytest.mark.skipif(not has_cuda(), reason="needs an NVIDIA GPU")
def test_cuda_json_says_tf32_false(cli, bench_env):
    r = cli("bench", "-d", "cuda", "-n", "50", "--format", "json", "--no-record")
    assert r.code == 0, r.err
    assert json.loads(r.out)["tf32"] is False


def test_result_is_printed_before_a_failing_store(cli, bench_env, tmp_path, monkeypatch):
    """The store cannot be written (its folder is a file): the result is printed, a warning given, exit 0."""
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("GPUSEAT_DATA_DIR", str(tmp_path / "file" / "data"))
    r = cli("bench", "-d", "cpu", "--threads", "1", "-n", "3", "--format", "json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["iterations"] == 3
    assert "result printed but not recorded" in r.err


def test_store_is_rewritten_whole_and_a_torn_line_dropped(cli, bench_env):
    cli("bench", "-d", "cpu", "--threads", "1", "-n", "3")
    store = bench_env / "bench-results.jsonl"
    store.write_text(store.read_text() + '{"gpu_name": "NVIDIA H2')  # a crash in the middle of a line
    assert len(recorded_results()) == 1  # the torn line is skipped
    assert cli("bench", "-d", "cpu", "--threads", "1", "-n", "4").code == 0
    lines = store.read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(line)["iterations"] in (3, 4) for line in lines)


def test_bench_without_torch_names_the_extra(tmp_path):
    import subprocess
    import sys

    code = "import sys; sys.modules['torch'] = None; from gpuseat.cli import main; sys.exit(main(['bench', '-n', '3']))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "pip install 'gpuseat[bench]'" in proc.stderr and "Traceback" not in proc.stderr


def test_iterations_in_exponent_form_is_a_usage_error(cli, bench_env):
    r = cli("bench", "-n", "1e11")
    assert r.code == 2 and "(got 1e11): type 100000000000" in r.err and "Traceback" not in r.err
