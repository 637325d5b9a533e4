"""The step-time benchmark's model: an MLP of about 25.2M float32 parameters
(101 MB of gradient per step), 1024 -> 4096 -> 4096 -> 1024 -> 10.

An MLP rather than a transformer: almost all of its time is three GEMMs, so a
small batch keeps compute short on a 2-core machine while the gradient stays
as large as a real model's (>= 25M parameters)."""
import torch
import torch.nn as nn

IN_FEATURES = 1024
CLASSES = 10


def build_model(width=4096, seed=0):
    torch.manual_seed(seed)  # every rank starts from the same weights, as DDP expects
    return nn.Sequential(
        nn.Linear(IN_FEATURES, width), nn.ReLU(),
        nn.Linear(width, width), nn.ReLU(),
        nn.Linear(width, IN_FEATURES), nn.ReLU(),
        nn.Linear(IN_FEATURES, CLASSES),
    )


def parameter_count(model):
    return sum(p.numel() for p in model.parameters())


if __name__ == "__main__":
    print(parameter_count(build_model()))
