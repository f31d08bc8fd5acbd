"""The workload of benchmarks/gpu_check.sh: a ResNet-18-like network, built here from torch
alone (torchvision may be missing), trained on synthetic CIFAR-shaped data for a fixed time.

The batches are made once on the device and cycled, so the GPU, not the data path, is what
the run keeps busy: at the defaults (width 64, batch 256, bf16 autocast on CUDA) one H100
runs near full SM activity, which is what the naive and MPS pairs of the check compete for.
Under radT each step calls ``radt.log_examples`` and ``radt.step`` (the torch listener's
steps), and every ``--steps-per-epoch`` steps ``radt.log_epoch`` and one line
``epoch N: loss X, Y examples/s``. ``--width 4 --batch-size 8 --device cpu`` is the stand-in
size of ``GPU_CHECK_DRY=1``.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

import radt


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Read the workload's options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="train this long, then end")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--width", type=int, default=64, help="channels of the first stage")
    parser.add_argument("--image", type=int, default=32, help="side of the square images")
    parser.add_argument("--steps-per-epoch", type=int, default=50)
    parser.add_argument("--batches", type=int, default=8, help="distinct synthetic batches")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: default)")
    return parser.parse_args(argv)


class Block(nn.Module):
    """ResNet's basic block: two 3x3 convolutions and a shortcut."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = nn.Sequential()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.short(x))


def resnet18(width: int = 64, classes: int = 10) -> nn.Module:
    """ResNet-18 for 32x32 images (the CIFAR variant: a 3x3 stem, no max pool)."""
    layers: list[nn.Module] = [
        nn.Conv2d(3, width, 3, 1, 1, bias=False),
        nn.BatchNorm2d(width),
        nn.ReLU(),
    ]
    cin = width
    for stage, mult in enumerate((1, 2, 4, 8)):
        cout = width * mult
        stride = 1 if stage == 0 else 2
        layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def main(argv: list[str] | None = None) -> int:
    """Train for ``--seconds``; print one line per epoch."""
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda:
        torch.backends.cudnn.benchmark = True
        print(f"device: {torch.cuda.get_device_name(device)}", flush=True)
    # channels_last where cuDNN gains from it; on the CPU (the dry run) oneDNN's backward of
    # such tiny convolutions crashed (torch 2.13.0+cpu: a segfault in the first backward)
    layout = torch.channels_last if cuda else torch.contiguous_format
    model = resnet18(args.width).to(device, memory_format=layout)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    shape = (args.batch_size, 3, args.image, args.image)
    batches = [
        (
            torch.randn(shape, device=device).contiguous(memory_format=layout),
            torch.randint(0, 10, (args.batch_size,), device=device),
        )
        for _ in range(args.batches)
    ]
    end = time.monotonic() + args.seconds
    epoch, step, loss = 0, 0, torch.zeros((), device=device)
    epoch_start = time.monotonic()
    while time.monotonic() < end:
        x, y = batches[step % len(batches)]
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            loss = loss_fn(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        radt.log_examples(args.batch_size)
        radt.step()
        step += 1
        if step % args.steps_per_epoch == 0:
            if cuda:
                torch.cuda.synchronize(device)
            now = time.monotonic()
            rate = args.steps_per_epoch * args.batch_size / (now - epoch_start)
            print(f"epoch {epoch}: loss {loss.item():.4f}, {rate:.1f} examples/s", flush=True)
            radt.log_epoch(epoch)
            epoch, epoch_start = epoch + 1, now
    print(f"done: {step} steps, {epoch} epochs in {args.seconds:g} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
