"""Caffe's LeNet and its solver in PyTorch: the same net, initialisation, data order and update rule.

One :class:`Trainer` serves both devices. Its step is made only of tensor operations that read the
iteration counter from a device tensor (the batch to read, the "inv" learning rate, where to store the
loss), so on CUDA the whole step (forward, backward, update) is captured once in a CUDA graph and
replayed with no host work; on CPU the same step runs eagerly over preloaded tensors.

Imports torch: import this module only inside functions that run a benchmark.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from gpuseat.bench.workload import Solver


class LeNet(nn.Module):
    """examples/mnist/lenet_train_test.prototxt: conv 20@5×5, pool, conv 50@5×5, pool, fc 500, ReLU, fc 10."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 20, 5)
        self.conv2 = nn.Conv2d(20, 50, 5)
        self.ip1 = nn.Linear(800, 500)
        self.ip2 = nn.Linear(500, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits; no ReLU after the convolutions, exactly as in Caffe's net."""
        x = F.max_pool2d(self.conv1(x), 2, 2)
        x = F.max_pool2d(self.conv2(x), 2, 2)
        logits: torch.Tensor = self.ip2(F.relu(self.ip1(x.flatten(1))))  # Module.__call__ is typed as Any
        return logits

    def caffe_init(self, seed: int) -> LeNet:
        """Caffe's "xavier" filler (U(±sqrt(3/fan_in))) for weights, zero biases; same values on every device."""
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for layer in (self.conv1, self.conv2, self.ip1, self.ip2):
                fan_in = layer.weight[0].numel()
                bound = math.sqrt(3.0 / fan_in)
                layer.weight.copy_(torch.rand(layer.weight.shape, generator=gen) * (2 * bound) - bound)
                _bias(layer).zero_()
        return self


def _bias(layer: nn.Module) -> torch.Tensor:
    """A layer's bias (every LeNet layer has one)."""
    bias = layer.bias
    assert isinstance(bias, torch.Tensor)
    return bias


def to_device(model: LeNet, device: torch.device) -> LeNet:
    """``model`` on ``device``; on a CPU in channels-last layout, where oneDNN's convolutions and PyTorch's
    max-pool run about 1.3× faster than in the default layout (measured on 2 EPYC vCPUs)."""
    model = model.to(device)
    if device.type != "cpu":
        return model
    # torch's stub lists Module.to overloads without the documented memory_format-only form
    placed: LeNet = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    return placed


def device_tensors(
    images: np.ndarray, labels: np.ndarray, scale: float, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Images as scaled float32 (N, 1, 28, 28) and labels as int64, resident on ``device``."""
    x = torch.from_numpy(np.ascontiguousarray(images)).to(device=device, dtype=torch.float32)
    x = x.mul_(scale).unsqueeze(1).contiguous()
    y = torch.from_numpy(np.ascontiguousarray(labels)).to(device=device, dtype=torch.int64)
    return x, y


def _new_stream() -> torch.cuda.Stream:
    """A new CUDA stream on the current device (torch's ``Stream.__new__`` is untyped: called through its type)."""
    make = cast(Callable[[], torch.cuda.Stream], torch.cuda.Stream)
    return make()


class Trainer:
    """Caffe's SGD solver over data resident on one device.

    Update (sgd_solver.cpp): ``diff = grad + wd * w; V = momentum * V + local_lr * diff; w -= V``, with
    ``local_lr`` the "inv" rate times the layer's lr_mult (2 for biases), weight decay on biases too.
    Batches are read in file order and wrap around, as Caffe's Data layer does.
    """

    def __init__(
        self,
        model: LeNet,
        images: torch.Tensor,
        labels: torch.Tensor,
        solver: Solver,
        iterations: int,
    ) -> None:
        device = images.device
        self.model = model
        self.solver = solver
        self.images, self.labels = images, labels
        self.weights = [m.weight for m in (model.conv1, model.conv2, model.ip1, model.ip2)]
        self.biases = [_bias(m) for m in (model.conv1, model.conv2, model.ip1, model.ip2)]
        self.params = self.weights + self.biases
        self.history = [torch.zeros_like(p) for p in self.params]
        self.iteration = torch.zeros((), dtype=torch.int64, device=device)
        self.losses = torch.zeros(iterations, dtype=torch.float32, device=device)
        self.offsets = torch.arange(solver.batch_size, dtype=torch.int64, device=device)
        self.graph: torch.cuda.CUDAGraph | None = None

    def batch_index(self) -> torch.Tensor:
        """Indices of this iteration's batch: Caffe's Data layer reads in file order and wraps around."""
        return (self.iteration * self.solver.batch_size + self.offsets) % self.images.shape[0]

    def step(self) -> None:
        """One training iteration; reads and advances the device-side iteration counter."""
        s = self.solver
        index = self.batch_index()
        logits = self.model(self.images.index_select(0, index))
        loss = F.cross_entropy(logits, self.labels.index_select(0, index))
        grads = torch.autograd.grad(loss, self.params)
        with torch.no_grad():
            slot = self.iteration.clamp(max=self.losses.shape[0] - 1).view(1)
            self.losses.index_copy_(0, slot, loss.detach().view(1))
            rate = s.base_lr * (1.0 + s.gamma * self.iteration.to(torch.float32)) ** (-s.power)
            diff = torch._foreach_add(grads, self.params, alpha=s.weight_decay)
            n_w = len(self.weights)
            torch._foreach_mul_(diff[:n_w], rate)
            torch._foreach_mul_(diff[n_w:], rate * s.bias_lr_mult)
            torch._foreach_mul_(self.history, s.momentum)
            torch._foreach_add_(self.history, diff)
            torch._foreach_sub_(self.params, self.history)
            self.iteration.add_(1)

    def snapshot(self) -> list[torch.Tensor]:
        """Copies of everything a step changes, so warm-up steps can be undone."""
        return [t.detach().clone() for t in (*self.params, *self.history, self.iteration)]

    def restore(self, saved: list[torch.Tensor]) -> None:
        """Put back a :meth:`snapshot` in place (tensors keep their storage, as a CUDA graph needs)."""
        with torch.no_grad():
            for target, value in zip((*self.params, *self.history, self.iteration), saved, strict=True):
                target.copy_(value)
            self.losses.zero_()

    def warm_up(self, steps: int) -> None:
        """Run ``steps`` steps (first-call costs, cuDNN autotuning), capture the CUDA graph, undo the steps."""
        saved = self.snapshot()
        if self.images.device.type == "cuda":
            side = _new_stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(steps):
                    self.step()
            torch.cuda.current_stream().wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.step()
            torch.cuda.synchronize()
        else:
            for _ in range(steps):
                self.step()
        self.restore(saved)

    def run(self, steps: int, on_step_block: Callable[[int], None] | None = None, block: int = 100) -> None:
        """``steps`` iterations (graph replays on CUDA); ``on_step_block(n)`` after each block of ``n``."""
        done = 0
        while done < steps:
            n = min(block, steps - done)
            for _ in range(n):
                if self.graph is not None:
                    self.graph.replay()
                else:
                    self.step()
            self.synchronize()
            done += n
            if on_step_block is not None:
                on_step_block(n)

    def synchronize(self) -> None:
        """Wait for queued GPU work, so a clock read after it measures the work."""
        if self.images.device.type == "cuda":
            torch.cuda.synchronize(self.images.device)

    def loss_curve(self, every: int = 100) -> list[tuple[int, float]]:
        """(iteration, loss) at iterations 0, ``every``, 2×``every`` … (Caffe's display points)."""
        values = self.losses.cpu().tolist()
        return [(i, values[i]) for i in range(0, len(values), every)]


def evaluate(model: LeNet, images: torch.Tensor, labels: torch.Tensor, batch: int = 1000) -> tuple[float, float]:
    """Test accuracy and mean cross-entropy over all of ``images`` (batch size does not change either)."""
    correct = torch.zeros((), dtype=torch.int64, device=images.device)
    total_loss = torch.zeros((), dtype=torch.float64, device=images.device)
    with torch.inference_mode():
        for start in range(0, images.shape[0], batch):
            logits = model(images[start : start + batch])
            target = labels[start : start + batch]
            correct += (logits.argmax(1) == target).sum()
            total_loss += F.cross_entropy(logits, target, reduction="sum").double()
    count = images.shape[0]
    return correct.item() / count, total_loss.item() / count
