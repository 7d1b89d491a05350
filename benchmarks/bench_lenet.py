"""gpuseat's LeNet benchmark next to a naive eager PyTorch loop: same net, data, iterations, device.

The naive loop is what a user would write first: a DataLoader over the same tensors (batch 64, file
order), ``torch.optim.SGD`` with momentum and weight decay, a LambdaLR for Caffe's "inv" policy, one
``.to(device)`` per batch, default threads and denormal handling. gpuseat's loop is the one
``gpuseat bench`` times (device-resident data, Caffe's update with foreach ops, CUDA graph on a GPU,
channels-last layout, denormals flushed and threads set on a CPU).

Both loops run in the same process in alternating blocks, so a busy machine slows both alike; the
ratio is naive time / gpuseat time (> 1: gpuseat is faster). Warm-up steps are excluded on both sides.

    .venv/bin/python benchmarks/bench_lenet.py --device cpu --iterations 1000
    .venv/bin/python benchmarks/bench_lenet.py --device cuda --iterations 10000
    .venv/bin/python benchmarks/bench_lenet.py --device cpu --iterations 200 --profile
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from gpuseat.bench.data import load_mnist
from gpuseat.bench.device import parse_device, usable_cpus
from gpuseat.bench.lenet import LeNet, Trainer, device_tensors, evaluate, to_device
from gpuseat.bench.run import open_device
from gpuseat.bench.workload import solver
from gpuseat.errors import GpuseatError


def naive_steps(model: LeNet, x: torch.Tensor, y: torch.Tensor, device: torch.device) -> Iterator[None]:
    """An endless eager training loop over a DataLoader; yields after each iteration."""
    s = solver()
    loader = DataLoader(TensorDataset(x, y), batch_size=s.batch_size, shuffle=False)
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    opt = torch.optim.SGD(
        [{"params": weights}, {"params": biases, "lr": s.base_lr * s.bias_lr_mult}],
        lr=s.base_lr,
        momentum=s.momentum,
        weight_decay=s.weight_decay,
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda it: (1 + s.gamma * it) ** -s.power)
    for xb, yb in itertools.chain.from_iterable(itertools.repeat(loader)):
        opt.zero_grad()
        loss = F.cross_entropy(model(xb.to(device)), yb.to(device))
        loss.backward()
        opt.step()
        sched.step()
        yield


def timed(block: Callable[[], None], device: torch.device) -> float:
    """Seconds one block takes, GPU work included."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    block()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def profile(label: str, block: Callable[[], None]) -> None:
    """Print where one block's time goes, by operator."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with torch_profile(activities=activities) as prof:
        block()
    print(f"\n== {label}: top operators by self time ==")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


def main() -> None:
    """Run both loops in alternating blocks and print both times and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--blocks", type=int, default=10, help="alternations between the two loops")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", action="store_true", help="also profile one block of each loop")
    args = parser.parse_args()

    s = solver()
    mnist = load_mnist()
    device = open_device(parse_device(args.device))
    default_threads = torch.get_num_threads()
    threads = usable_cpus()
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True

    def gpuseat_mode() -> None:
        if device.type == "cpu":
            torch.set_num_threads(threads)
            torch.set_flush_denormal(True)

    def naive_mode() -> None:
        if device.type == "cpu":
            torch.set_num_threads(default_threads)
            torch.set_flush_denormal(False)

    fast_model = to_device(LeNet().caffe_init(args.seed), device)
    train_x, train_y = device_tensors(mnist.train_images, mnist.train_labels, s.input_scale, device)
    trainer = Trainer(fast_model, train_x, train_y, s, args.iterations)
    gpuseat_mode()
    trainer.warm_up(5)

    cpu_x, cpu_y = device_tensors(mnist.train_images, mnist.train_labels, s.input_scale, torch.device("cpu"))
    naive_model = LeNet().caffe_init(args.seed).to(device)
    naive = naive_steps(naive_model, cpu_x, cpu_y, device)
    naive_mode()
    for _ in range(5):  # warm-up, as on gpuseat's side (these steps do train the naive model)
        next(naive)

    fast_seconds = naive_seconds = 0.0
    base, extra = divmod(args.iterations, args.blocks)
    for block in range(args.blocks):
        n = base + (1 if block < extra else 0)
        gpuseat_mode()
        fast_seconds += timed(lambda n=n: trainer.run(n, block=max(n, 1)), device)
        naive_mode()
        naive_seconds += timed(lambda n=n: [next(naive) for _ in range(n)] and None, device)

    test_x, test_y = device_tensors(mnist.test_images, mnist.test_labels, s.input_scale, device)
    fast_acc, _ = evaluate(fast_model, test_x, test_y)
    naive_acc, _ = evaluate(naive_model, test_x, test_y)
    it = args.iterations
    print(f"device: {device} ({torch.__version__}, {threads} threads for gpuseat, {default_threads} default)")
    print(f"gpuseat loop: {fast_seconds:8.2f} s  {it / fast_seconds:8.1f} it/s  test accuracy {fast_acc:.4f}")
    print(f"naive eager:  {naive_seconds:8.2f} s  {it / naive_seconds:8.1f} it/s  test accuracy {naive_acc:.4f}")
    print(f"ratio (naive / gpuseat): {naive_seconds / fast_seconds:.2f}x")
    if args.profile:
        gpuseat_mode()
        profile("gpuseat loop, 50 iterations", lambda: trainer.run(50, block=50))
        naive_mode()
        profile("naive eager loop, 50 iterations", lambda: [next(naive) for _ in range(50)] and None)


if __name__ == "__main__":
    try:
        main()
    except GpuseatError as exc:
        sys.exit(f"error: {exc.message}")
