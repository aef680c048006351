"""Profile a few training steps of examples/my_model.py's Net with torch.profiler, for
`scalebench layers ... --profile` (README, "Your own model"): each step is one ProfilerStep,
the trace is Chrome JSON with the module calls (with_stack=True) the layer times are matched by.

    python examples/profile_my_model.py --batch 8 --image 64 -o step.json
    scalebench layers examples/my_model.py:Net --input-shape 8,3,64,64 --profile step.json -o timed.csv
"""

import argparse
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

sys.path.insert(0, str(Path(__file__).resolve().parent))
from my_model import Net  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--image", type=int, default=64, help="image height and width")
    parser.add_argument("--steps", type=int, default=3, help="profiled training steps (after one warm-up step)")
    parser.add_argument("-o", "--out", default="step.json")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(args.batch, 3, args.image, args.image)
    y = torch.randint(0, 1000, (args.batch,))
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities, with_stack=True,
                 schedule=schedule(wait=0, warmup=1, active=args.steps, repeat=1), acc_events=True) as prof:
        for _ in range(1 + args.steps):
            optimizer.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            prof.step()
    prof.export_chrome_trace(args.out)
    print(f"{args.steps} training steps of Net at batch {args.batch} -> {args.out}")


if __name__ == "__main__":
    main()
