"""``gpuseat bench``: Caffe's LeNet/MNIST benchmark, faithful to the 2016 reference runs.

Modules that need no PyTorch (import them freely): :mod:`~gpuseat.bench.workload` (solver and MNIST
facts), :mod:`~gpuseat.bench.data` (MNIST loading and checksums), :mod:`~gpuseat.bench.device`
(device names and facts), :mod:`~gpuseat.bench.results` (the results store and the comparison with the
reference machines), :mod:`~gpuseat.bench.fleet` (one process per seat). Only
:mod:`~gpuseat.bench.lenet` and :mod:`~gpuseat.bench.run` import torch, and only when a benchmark runs.
"""
