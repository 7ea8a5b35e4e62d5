"""A preload module that makes torch report an initialised CUDA without a GPU, so that the
zygote's refusal is tested on machines that have none. It changes nothing else."""

import torch

torch.cuda.is_initialized = lambda: True
