"""A tiny DeepSpeed training job: the launch `make demo` checks, and a shape to compare yours with.

    cluster-tests -- deepspeed --hostfile hostfile train.py --deepspeed_config ds_config.json

A linear model is fitted to a fixed linear target on synthetic data (a fixed seed, no
downloads), for `--steps` optimizer steps; every rank prints its first and last loss. On a
machine without an accelerator DeepSpeed trains on the CPU (DS_ACCELERATOR=cpu, gloo).
"""

import argparse

import deepspeed
import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local_rank", type=int, default=-1)  # the launcher passes it
    parser.add_argument("--steps", type=int, default=20)
    deepspeed.add_config_arguments(parser)
    args = parser.parse_args()
    deepspeed.init_distributed()
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    engine, _, _, _ = deepspeed.initialize(args=args, model=model, optimizer=optimizer)
    target = torch.randn(16, 1)
    losses = []
    for _ in range(args.steps):
        x = torch.randn(engine.train_micro_batch_size_per_gpu(), 16).to(engine.device)
        loss = torch.nn.functional.mse_loss(engine(x), x @ target.to(engine.device))
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    print(f"rank {engine.global_rank}: loss {losses[0]:.4f} -> {losses[-1]:.4f}", flush=True)


if __name__ == "__main__":
    main()
