"""scalebench layers: the layer table of your own torch model (or a zoo model), for ``workload:
{layers_file: layers.csv}``; ``--profile`` adds measured per-layer times from a torch.profiler trace.

    scalebench layers my_model.py:Net --input-shape 32,3,224,224 [--dtype bf16] -o layers.csv
    scalebench layers my_model.py:Net --input-shape 32,3,224,224 --profile step.json -o layers.csv
    scalebench layers --zoo [NAME ...] [--check]      # the zoo's own files (sim/data/workloads/)
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys

DTYPE_CHOICES = ("fp32", "bf16", "fp16")
DEVICE_CHOICES = ("meta", "cpu")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", nargs="*", metavar="TARGET",
                        help="MODULE:CALLABLE (my_model.py:Net or package.module:build_model: a class or function "
                             "called with no arguments that returns an nn.Module), or a zoo model name; "
                             "with --zoo: zoo model names (default: all)")
    parser.add_argument("--input-shape", metavar="B,D1,...",
                        help="the model's input, batch first (e.g. 32,3,224,224); required for MODULE:CALLABLE. "
                             "The batch becomes the table's default workload.batch_size")
    parser.add_argument("--dtype", choices=DTYPE_CHOICES, default="fp32",
                        help="parameters and floating inputs in this dtype: fp32 (default), bf16, fp16 "
                             "(FLOPs do not change; set strategy.precision to match)")
    parser.add_argument("--tokens", type=int, metavar="VOCAB",
                        help="the input is integer token ids below VOCAB (a language model) instead of floats")
    parser.add_argument("--device", choices=DEVICE_CHOICES, default="meta",
                        help="build and trace on meta tensors (default: no memory, any size) or cpu (for a forward "
                             "that reads tensor values)")
    parser.add_argument("--name", help="the model's name in results (default: CALLABLE)")
    parser.add_argument("--profile", metavar="TRACE.json",
                        help="a torch.profiler trace (Chrome JSON, with_stack=True) of training steps at the same "
                             "batch: adds each layer's measured fwd_time_s and bwd_time_s (mean over the steps)")
    parser.add_argument("-o", "--out", metavar="FILE.csv", help="write the table here (default: standard output)")
    parser.add_argument("--zoo", action="store_true", help="derive the zoo's files into sim/data/workloads/")
    parser.add_argument("--check", action="store_true", help="with --zoo: compare with the committed files, write nothing")


def run(args: argparse.Namespace) -> int:
    from scalebench.commands.common import require_torch
    from sim.errors import ConfigError

    require_torch()
    if args.out:
        from sim.fileio import check_writable

        check_writable("-o", args.out)
    if args.zoo:
        return _zoo(args)
    if args.check:
        raise ConfigError("--check", True, "only with --zoo")
    if args.name is not None and (not args.name.strip() or any(c in args.name for c in ",\"") or
                                  any(not c.isprintable() for c in args.name)):
        raise ConfigError("--name", args.name, "a printable name without commas or quotes (it names the model in "
                          "results and in the table's meta line)")
    if len(args.target) != 1:
        raise ConfigError("TARGET", " ".join(args.target) or None, "one MODULE:CALLABLE or zoo model name")
    return _derive(args, args.target[0])


def _zoo(args: argparse.Namespace) -> int:
    from real.models import MODELS
    from real.zoo_tables import write_zoo
    from sim.errors import ConfigError

    for name in args.target:
        if name not in MODELS:
            raise ConfigError("TARGET", name, sorted(MODELS))
    stale = write_zoo(list(args.target), check=args.check)
    return 1 if stale else 0


def _derive(args: argparse.Namespace, target: str) -> int:
    from real.derive import DeriveError, derive, method_lines, render_csv
    from real.models import MODELS
    from real.user_model import build_user_model, parse_shape, user_batch_of
    from sim.errors import ConfigError, require_positive

    if args.tokens is not None:
        require_positive("--tokens", args.tokens, integer=True)
    if target in MODELS and ":" not in target:
        if args.input_shape or args.tokens:
            raise ConfigError("--input-shape", args.input_shape or args.tokens, "nothing for a zoo model (it has its own input)")
        from real.zoo_tables import derive_zoo

        name, shape = args.name or target, None
        try:
            derived = derive_zoo(target, args.device)
        except DeriveError as err:
            raise ConfigError("TARGET", target, str(err)) from None
        batch = None
    else:
        if not args.input_shape:
            raise ConfigError("--input-shape", None, "the model's input shape, batch first (e.g. 32,3,224,224)")
        shape = parse_shape(args.input_shape)
        name = args.name or target.rpartition(":")[2]
        model = build_user_model(target, args.device, args.dtype)
        try:
            derived = derive(model, user_batch_of(shape, args.dtype, args.tokens, args.device), name)
        except DeriveError as err:
            raise ConfigError("TARGET", target, str(err)) from None
        except ConfigError:
            raise
        except Exception as err:  # the user's forward: one line, with the way out
            hint = "; try --device cpu" if args.device == "meta" else ""
            raise ConfigError("TARGET", target, f"a forward and backward that run on --input-shape {args.input_shape} "
                              f"({type(err).__name__}: {str(err).strip().splitlines()[0][:200] if str(err).strip() else ''}){hint}") from None
        batch = shape[0]
    meta = {"name": name, "batch_size": batch, "dtype": args.dtype, "input_shape": list(shape) if shape else None}
    times = None
    header = [f"{name}: layer table per sample, generated by `{_command(args, target)}` "
              f"(torch {__import__('torch').__version__}).", *method_lines(args.device)]
    if args.profile:
        from real.kineto import layer_times_from_trace, trace_metadata

        profile = layer_times_from_trace(args.profile, derived)
        times = profile.times_s
        if batch is None:  # a zoo model: the batch the harness ran (scalebench real --profile records it)
            traced = trace_metadata(args.profile)
            if traced.get("model") not in (None, target):
                raise ConfigError("--profile", args.profile, f"a trace of {target} (this one profiled {traced['model']})")
            batch = traced.get("batch_size") if isinstance(traced.get("batch_size"), int) else None
            meta["batch_size"] = batch
        meta["times_batch_size"] = batch
        header.append(profile.summary_line(args.profile))
    header.append("meta: " + json.dumps({k: v for k, v in meta.items() if v is not None}))
    text = render_csv(derived.rows, header, times)
    rows = derived.rows
    summary = (f"{name}: {len(rows)} layers, {sum(r.param_count for r in rows):,d} parameters, "
               f"{sum(r.fwd_flops for r in rows) / 1e9:.4g} GFLOPs forward per sample")
    if args.out:
        from sim.fileio import atomic_write_text

        atomic_write_text(args.out, text)
        print(f"{summary} -> {args.out}")
        if times:
            print(f"  measured: forward {sum(t[0] for t in times) * 1e3:.3f} ms, backward "
                  f"{sum(t[1] for t in times) * 1e3:.3f} ms per step at batch {batch}")
        print(f"  use it: workload: {{layers_file: {args.out}}}"
              + (f"  (and strategy: {{precision: {args.dtype}}})" if args.dtype != "fp32" else ""))
    else:
        sys.stdout.write(text)
        print(summary, file=sys.stderr)
    return 0


def _command(args: argparse.Namespace, target: str) -> str:
    """The command line that reproduces the table (the file's first comment)."""
    parts = ["scalebench", "layers", target]
    for flag, value, default in (("--input-shape", args.input_shape, None), ("--dtype", args.dtype, "fp32"),
                                 ("--tokens", args.tokens, None), ("--device", args.device, "meta"),
                                 ("--name", args.name, None), ("--profile", args.profile, None)):
        if value is not None and value != default:
            parts += [flag, str(value)]
    return shlex.join(parts)
