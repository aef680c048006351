"""The simulator checked on a real GPU, in one command (docs/validation.md, 'On a GPU').

    python3 scripts/gpu_check.py run --out DIR [--budget-s 420] [--dry-run] [--sections ...]
    python3 scripts/gpu_check.py report DIR [--gpu NAME]          # re-predict a run with this tree's model
    python3 scripts/gpu_check.py collect DIR [--dest results/gpu]  # file a returned run under results/gpu/<gpu>/<date>/

``run`` measures, on CUDA device 0 (real/gpucheck/):
1. compute: per-model, per-unit and per-layer forward and backward times of resnet50, bert_base,
   gpt2_medium and a Llama block stack, fp32 / bf16 / fp16, two batch sizes each;
2. memory: a training step's static bytes, saved activations and peak allocation, gpt2_medium and
   the Llama stack at three batch sizes, fp32 and bf16 autocast, with and without checkpointing;
3. interference: a GEMM loop and a memory-bound loop alone and beside NCCL-style kernels that hold
   SMs (and move data), and beside device-to-device copies;
4. the harness on CUDA: ``scalebench real`` with NCCL on one rank (DDP, a torch.profiler trace
   read back by ``scalebench layers --profile``, the fp8 hook), the hooks on GPU tensors against
   their error bound, 2 and 4 gloo ranks sharing the GPU with CUDA tensors, ``real --comm``.
Beside each measurement, what the simulator predicts for the catalog's GPU
(validation/gpu_report.py). Into ``--out`` go gpu_check.json (every measurement, rewritten after
each case), report.md and comparison.csv (after each section), artifacts.tar.gz (the harness'
rows, traces and logs; some compute traces): four files, so that a lent machine's few returned
files hold it all. A section that fails is recorded and the next runs; past ``--budget-s`` no new
work starts (each section has a share of what is left). ``--dry-run`` runs every section on the
CPU with tiny stand-ins and the wall clock, without the CUDA-only parts (events, allocator peaks,
NCCL, the SM-holding kernels): what CI runs (tests/test_gpu_check.py).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from real.gpucheck.plan import SECTIONS, HarnessStep, Plan, case_flops, plan_for  # noqa: E402
from sim.errors import ConfigError  # noqa: E402
from validation.gpu_report import FORMAT, build_report, check_format  # noqa: E402

RESULT_FILES = ("gpu_check.json", "report.md", "comparison.csv", "artifacts.tar.gz")
ARTIFACTS_MAX_BYTES = 15 * 2**20
"""The tarball's ceiling: the device tool returns files of at most 16 MiB."""
KEEP_TRACES = ("bf16",)
"""Compute cases whose profiler traces go into the tarball (at their larger batch): one per model."""
STEP_TIMEOUT_S = 240.0
"""The longest a harness step may run (a hang is also ended by the harness' own --timeout)."""


# -- the run -----------------------------------------------------------------------------------

class Run:
    """One run's state: where it writes, its budget, and the results so far (saved after each case)."""

    def __init__(self, out: Path, work: Path, plan: Plan, device, budget_s: float, sections: list[str],
                 gpu: str | None = None):
        self.out, self.work, self.plan, self.device = out, work, plan, device
        self.gpu = gpu
        """The catalog GPU to predict (--gpu), None: the device's own entry."""
        self.start = time.monotonic()
        self.budget_s = budget_s
        self.sections = sections
        self.data: dict[str, Any] = {"format": FORMAT, "meta": {}, "sections": {}}
        self.section_deadline = self.start + budget_s

    def elapsed_s(self) -> float:
        return time.monotonic() - self.start

    def left_s(self) -> float:
        return self.section_deadline - time.monotonic()

    def out_of_time(self) -> bool:
        return time.monotonic() >= self.section_deadline

    def open_section(self, name: str) -> dict[str, Any]:
        """Start ``name``: its deadline is its share of the budget left, among the sections still to run."""
        todo = self.sections[self.sections.index(name):]
        shares = self.plan.shares
        share = shares.get(name, 1.0) / sum(shares.get(s, 1.0) for s in todo)
        left = self.start + self.budget_s - time.monotonic()
        self.section_deadline = time.monotonic() + max(0.0, left) * share
        section = {"status": "running", "budget_s": round(max(0.0, left) * share, 1)}
        self.data["sections"][name] = section
        return section

    def save(self) -> None:
        from sim.fileio import atomic_write_text

        self.data["meta"]["elapsed_s"] = round(self.elapsed_s(), 1)
        atomic_write_text(self.out / "gpu_check.json", json.dumps(self.data, indent=1, default=_json_default))

    def write_report(self) -> str:
        """report.md and comparison.csv from what is measured so far; the report's text."""
        from sim.fileio import atomic_write_text

        try:
            report, table, _ = build_report(json.loads(json.dumps(self.data, default=_json_default)), self.gpu)
        except Exception as err:  # a prediction that fails must not lose the measurements
            report = (f"# GPU check\n\nThe comparison failed: {type(err).__name__}: {err}\n\n"
                      f"```\n{traceback.format_exc()[-3000:]}\n```\n")
            table = ""
        atomic_write_text(self.out / "report.md", report)
        atomic_write_text(self.out / "comparison.csv", table)
        return report

    def pack_artifacts(self) -> None:
        """artifacts.tar.gz from the work folder, the largest traces dropped until it fits."""
        target = self.out / "artifacts.tar.gz"
        files = sorted((p for p in self.work.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
        while True:
            tmp = target.with_suffix(".tmp")
            with tarfile.open(tmp, "w:gz") as tar:
                for path in files:
                    tar.add(path, arcname=str(path.relative_to(self.work)))
            if tmp.stat().st_size <= ARTIFACTS_MAX_BYTES or not files:
                os.replace(tmp, target)
                return
            dropped = files.pop()
            self.data["meta"].setdefault("artifacts_dropped", []).append(str(dropped.relative_to(self.work)))


def _json_default(value: Any) -> Any:
    if isinstance(value, set):
        return sorted(value)
    if isinstance(value, Path):
        return str(value)
    return str(value)


def _error(err: BaseException) -> str:
    from real.gpucheck.models import is_out_of_memory

    first = (str(err).strip().splitlines() or [""])[0][:300]
    return ("out of memory: " if is_out_of_memory(err) else "") + f"{type(err).__name__}: {first}"


# -- sections ----------------------------------------------------------------------------------

def section_compute(run: Run, section: dict[str, Any]) -> None:
    from real.gpucheck import models as M
    from real.gpucheck.compute import measure_case

    cases: list[dict[str, Any]] = section.setdefault("cases", [])
    derived: dict[str, Any] = {}
    order = [d for d in ("bf16", "fp16", "fp32") if d in run.plan.dtypes]  # cheapest first: a cut loses fp32
    for dtype in order:
        for case in run.plan.models:
            for batch in case.compute_batches:
                entry: dict[str, Any] = {"model": case.name, "dtype": dtype, "batch_size": batch,
                                         "workload": case.workload(batch), "flops": case_flops(case, batch)}
                if case.stand_in:
                    entry["stand_in"] = case.stand_in
                if run.out_of_time():
                    entry["error"] = "skipped: the section's time ran out"
                    cases.append(entry)
                    continue
                started = time.monotonic()
                try:
                    if case.name not in derived:
                        derived[case.name] = M.derived(case)
                    keep = dtype in KEEP_TRACES and batch == max(case.compute_batches)
                    trace = run.work / "traces" / f"compute_{case.name}_{dtype}_b{batch}.json"
                    entry.update(measure_case(case, dtype, batch, run.plan, run.device, derived[case.name], trace))
                    if keep:
                        entry["trace"] = str(trace.relative_to(run.work))
                    else:
                        trace.unlink(missing_ok=True)
                except Exception as err:
                    entry["error"] = _error(err)
                finally:
                    M.free_cuda()
                entry["elapsed_s"] = round(time.monotonic() - started, 2)
                cases.append(entry)
                _progress(f"compute {case.name} {dtype} b{batch}: " + (entry.get("error") or
                          f"step {entry['step']['total_s'] * 1e3:.2f} ms ({entry['elapsed_s']} s)"))
                run.save()


def section_memory(run: Run, section: dict[str, Any]) -> None:
    from real.gpucheck import models as M
    from real.gpucheck.memory import measure_memory

    cases: list[dict[str, Any]] = section.setdefault("cases", [])
    for precision in reversed(run.plan.memory_precisions):  # bf16 first: the cheaper
        for case in run.plan.models:
            for checkpointing in (False, True):
                failed_at = None
                for batch in case.memory_batches:
                    entry: dict[str, Any] = {"model": case.name, "precision": precision, "batch_size": batch,
                                             "checkpointing": checkpointing, "workload": case.workload(batch)}
                    if run.out_of_time():
                        entry["error"] = "skipped: the section's time ran out"
                    elif failed_at is not None:
                        entry["error"] = f"skipped: batch {failed_at} ran out of memory"
                    else:
                        try:
                            entry.update(measure_memory(case, batch, precision, checkpointing, run.device))
                        except Exception as err:
                            entry["error"] = _error(err)
                            if entry["error"].startswith("out of memory"):
                                failed_at = batch
                        finally:
                            M.free_cuda()
                    cases.append(entry)
                    _progress(f"memory {case.name} {precision} b{batch}{' ckpt' if checkpointing else ''}: "
                              + (entry.get("error") or f"peak {entry.get('peak_allocated_bytes', 0) / 2**30:.2f} GiB, "
                                 f"saved {entry['saved_activation_bytes'] / 2**30:.3f} GiB"))
                    run.save()


def section_interference(run: Run, section: dict[str, Any]) -> None:
    from dataclasses import replace

    from real.gpucheck.interference import measure_interference
    from validation.gpu_report import model_channels, prediction_gpu

    plan = run.plan.interference
    try:
        gpu = prediction_gpu(run.data, run.gpu)
        section["model_channels"] = model_channels(gpu)
        channels = section["model_channels"]["channels"]
        if channels not in plan.channels:  # the model's own channel count is measured too
            plan = replace(plan, channels=tuple(sorted({*plan.channels, channels})))
    except ConfigError as err:
        section["model_channels_error"] = str(err)
    section["result"] = measure_interference(plan, run.device)
    for config in section["result"]["configs"]:
        _progress(f"interference {config['interferer']} {config['channels']}: "
                  + (config.get("error") or f"gemm {100 * config['gemm_slowdown']:+.1f} %, "
                                            f"stream {100 * config['stream_slowdown']:+.1f} %"))
    run.save()


def section_harness(run: Run, section: dict[str, Any]) -> None:
    steps: list[dict[str, Any]] = section.setdefault("steps", [])
    art = run.work / "harness"
    art.mkdir(parents=True, exist_ok=True)
    for step in run.plan.harness:
        argv = step.dry_argv if run.plan.dry_run else step.argv
        record: dict[str, Any] = {"name": step.name}
        if argv is None:
            record.update(status="skipped", summary="CUDA only")
        elif run.out_of_time():
            record.update(status="skipped", summary="the section's time ran out")
        else:
            record.update(_run_step(run, step, [a.replace("{art}", str(art)) for a in argv], art))
        steps.append(record)
        _progress(f"harness {step.name}: {record['status']} {record.get('summary', '')}")
        run.save()


def _run_step(run: Run, step: HarnessStep, argv: list[str], art: Path) -> dict[str, Any]:
    if argv[0] == "layers":  # no ranks, no CUDA: in this process, without another start of torch
        return _run_in_process(step, argv, art)
    if argv[0] == "hooks":
        out_json = art / f"{step.name}.json"
        cmd = [sys.executable, "-m", "real.gpucheck.hookcheck", *argv[1:], str(out_json)]
    else:
        cmd = [sys.executable, "-m", "scalebench", *argv]
    log = art / f"{step.name}.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "PYTHONUNBUFFERED": "1"}
    timeout = max(10.0, min(STEP_TIMEOUT_S, run.left_s()))
    started = time.monotonic()
    with open(log, "w+b") as fh:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        rc: int | None = None
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        finally:
            if proc.poll() is None:  # timed out, or this run is being stopped: the step and the ranks it started
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        fh.seek(0)
        tail = fh.read().decode(errors="replace").strip().splitlines()[-12:]
    record: dict[str, Any] = {"command": " ".join(["scalebench" if c == "scalebench" else c for c in cmd[2:]]),
                              "rc": rc, "elapsed_s": round(time.monotonic() - started, 1), "output_tail": tail,
                              "status": "ok" if rc == 0 else ("timed out" if rc is None else f"failed (exit {rc})")}
    try:
        record.update(_parse_step(argv, art, step))
    except Exception as err:  # what the step wrote is not what we expected: say so, keep going
        record["summary"] = f"its output could not be read ({_error(err)})"
    if rc != 0 and tail:
        record["summary"] = (record.get("summary", "") + " | " + tail[-1])[-300:]
    return record


def _run_in_process(step: HarnessStep, argv: list[str], art: Path) -> dict[str, Any]:
    import contextlib
    import io

    from scalebench.cli import main as scalebench_main

    started = time.monotonic()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        rc = scalebench_main(argv)
    if rc in (128 + signal.SIGTERM, 128 + signal.SIGHUP):  # the run itself is being stopped
        raise SystemExit(rc)
    (art / f"{step.name}.log").write_text(buf.getvalue())
    tail = buf.getvalue().strip().splitlines()[-12:]
    record: dict[str, Any] = {"command": "scalebench " + " ".join(argv), "rc": rc, "output_tail": tail,
                              "elapsed_s": round(time.monotonic() - started, 1),
                              "status": "ok" if rc == 0 else f"failed (exit {rc})"}
    try:
        record.update(_parse_step(argv, art, step))
    except Exception as err:
        record["summary"] = f"its output could not be read ({_error(err)})"
    if rc != 0 and tail:
        record["summary"] = (record.get("summary", "") + " | " + tail[-1])[-300:]
    return record


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def _parse_step(argv: list[str], art: Path, step: HarnessStep) -> dict[str, Any]:
    import csv

    if argv[0] == "hooks":
        result = json.loads((art / f"{step.name}.json").read_text())
        parts = [f"{name} {f['path']} {'ok' if f['within_bound'] else 'OUTSIDE bound'}"
                 for name, f in result["formats"].items()]
        device = next(iter(result["formats"].values()), {}).get("device", "?")
        return {"summary": f"{result['ranks']} rank(s) {result['backend']} on {device}: " + "; ".join(parts),
                "hooks": result}
    out = _flag(argv, "--out") or _flag(argv, "-o")
    if out is None or not Path(out).exists():
        return {"summary": "no output file"}
    rows = list(csv.DictReader(line for line in Path(out).read_text().splitlines() if not line.startswith("#")))
    if argv[0] == "layers":
        fwd = sum(float(r["fwd_time_s"]) for r in rows if r.get("fwd_time_s"))
        bwd = sum(float(r["bwd_time_s"]) for r in rows if r.get("bwd_time_s"))
        return {"summary": f"{len(rows)} layers with measured times: forward {fwd * 1e3:.3f} ms, backward {bwd * 1e3:.3f} ms"}
    if "--comm" in argv:
        good = [r for r in rows if r.get("time_s")]
        wrong = sum(int(float(r.get("wrong") or 0)) for r in rows)
        best = max((float(r["busbw_GBps"]) for r in good), default=0.0)
        algbw = max((float(r["algbw_GBps"]) for r in good), default=0.0)
        names = sorted({r["collective"] for r in good})
        return {"summary": f"{', '.join(names)}: {len(good)} sizes, #wrong {wrong}, best algbw {algbw:.1f} GB/s, "
                           f"busbw {best:.1f} GB/s on {rows[0].get('gpu_model') or rows[0].get('device') or '?'}",
                "rows": len(good)}
    row = rows[0]
    iteration = float(row["iteration_time_s"])
    record: dict[str, Any] = {
        "summary": f"{row['world_size']} rank(s) {row['backend']} on {row.get('gpu_model') or row.get('gpu')}: iteration "
                   f"{iteration * 1e3:.2f} ms, compute {float(row['compute_time_s']) * 1e3:.2f} ms, {row.get('comm_path')}",
        "iteration_time_s": iteration}
    if _flag(argv, "--gpus") == "1":  # one rank: the simulator's one-GPU iteration of the same model
        record["predict"] = {"workload": {"model": row["model"], "batch_size": int(row["batch_size"])},
                             "precision": "fp32"}
    return record


def _progress(message: str) -> None:
    print(f"gpu_check: {message}", file=sys.stderr, flush=True)


# -- the environment ---------------------------------------------------------------------------

def environment(device, dry_run: bool, argv: list[str], budget_s: float) -> dict[str, Any]:
    import torch

    from real.results import git_revision

    now = datetime.datetime.now(datetime.UTC)
    meta: dict[str, Any] = {
        "date": now.strftime("%Y-%m-%d"), "started_utc": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "dry_run": dry_run,
        "command": "python3 scripts/gpu_check.py " + " ".join(argv), "host": socket.gethostname(),
        "cpus": os.cpu_count(), "git_revision": git_revision(), "torch": torch.__version__, "budget_s": budget_s,
        "precision_flags": (f"matmul allow_tf32 {torch.backends.cuda.matmul.allow_tf32}, cudnn allow_tf32 "
                            f"{torch.backends.cudnn.allow_tf32}, float32_matmul_precision "
                            f"{torch.get_float32_matmul_precision()}, cudnn.benchmark {torch.backends.cudnn.benchmark}"),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        meta.update({"device": props.name, "sms": props.multi_processor_count, "memory_bytes": props.total_memory,
                     "compute_capability": f"{props.major}.{props.minor}", "cuda": torch.version.cuda,
                     "cudnn": torch.backends.cudnn.version()})
        try:
            meta["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except Exception as err:
            meta["nccl"] = f"unknown ({type(err).__name__})"
        meta["nvidia_smi_before"] = nvidia_smi()
        meta["driver"] = meta["nvidia_smi_before"].split(", ")[1] if meta["nvidia_smi_before"].count(", ") >= 1 else ""
    else:
        from real.results import cpu_model

        meta.update({"device": f"CPU {cpu_model()} (dry run)", "threads": torch.get_num_threads()})
    for name in ("cupy", "triton"):
        try:
            meta[name] = __import__(name).__version__
        except Exception:
            meta[name] = None
    return meta


NVIDIA_SMI_QUERY = "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu"


def nvidia_smi() -> str:
    """The card's state, read only (clocks, power, temperature): the run's conditions."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={NVIDIA_SMI_QUERY}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip() or out.stderr.strip()
    except (OSError, subprocess.SubprocessError) as err:
        return f"nvidia-smi unavailable ({type(err).__name__})"


# -- commands ----------------------------------------------------------------------------------

SECTION_FUNCS = {"compute": section_compute, "memory": section_memory, "interference": section_interference,
                 "harness": section_harness}


def cmd_run(args: argparse.Namespace, argv: list[str]) -> int:
    from sim.errors import require_positive
    from sim.fileio import check_writable

    require_positive("--budget-s", args.budget_s)
    sections = args.sections or list(SECTIONS)
    for name in sections:
        if name not in SECTIONS:
            raise ConfigError("--sections", name, SECTIONS)
    sections = [s for s in SECTIONS if s in sections]
    if args.gpu:
        from sim.catalog import builtin_catalog

        builtin_catalog().gpu(args.gpu, "--gpu")
    out = Path(args.out)
    check_writable("--out", out, directory=True)
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        raise ConfigError("--dry-run", False, "--dry-run here (torch sees no CUDA device); the GPU run needs one")
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cpu") if args.dry_run else torch.device("cuda", 0)
    if args.dry_run:
        torch.set_num_threads(1)  # two shared cores: one thread each keeps the dry run quick and steady
    else:
        torch.cuda.set_device(device)
    plan = plan_for(args.dry_run)
    work = Path(tempfile.mkdtemp(prefix="gpu_check-"))
    run = Run(out, work, plan, device, args.budget_s, sections, args.gpu)
    run.data["meta"] = environment(device, args.dry_run, argv, args.budget_s)
    run.data["meta"]["sections"] = sections
    from validation.gpu_report import prediction_gpu

    try:
        run.data["meta"]["catalog_gpu"] = prediction_gpu(run.data, args.gpu)
    except ConfigError as err:
        run.data["meta"]["catalog_gpu"] = f"none ({err})"
    run.save()
    _progress(f"{run.data['meta']['device']}: sections {', '.join(sections)}; budget {args.budget_s:.0f} s; "
              f"results in {out}")
    failed = False
    signal.signal(signal.SIGTERM, _stop)  # `timeout` ends the run: the finally below still writes the files
    try:
        for name in sections:
            section = run.open_section(name)
            started = time.monotonic()
            try:
                SECTION_FUNCS[name](run, section)
                section["status"] = "done" if not run.out_of_time() else "done (time ran out)"
            except Exception as err:
                section["status"] = "failed"
                section["error"] = _error(err)
                section["traceback"] = traceback.format_exc()[-4000:]
                failed = True
            section["elapsed_s"] = round(time.monotonic() - started, 1)
            failed |= _section_failed(section)
            run.save()
            run.write_report()
            run.pack_artifacts()
            run.save()
    finally:
        for section in run.data["sections"].values():
            if section.get("status") == "running":  # stopped from outside (SIGTERM) in the middle of it
                section["status"] = "interrupted"
        if device.type == "cuda":
            run.data["meta"]["nvidia_smi_after"] = nvidia_smi()
        run.save()
        report = run.write_report()
        run.pack_artifacts()
        shutil.rmtree(work, ignore_errors=True)
    sys.stdout.write(report)
    print(f"\ngpu_check: {'FAILED parts above' if failed else 'every section ran'}; "
          f"{run.elapsed_s():.0f} s of {args.budget_s:.0f}; files in {out}: {', '.join(RESULT_FILES)}")
    return 1 if failed else 0


def _stop(signum, frame) -> None:
    raise SystemExit(128 + signum)


def _section_failed(section: dict[str, Any]) -> bool:
    """A case or step that broke (a run out of memory is a measurement, a skip for time is not a failure)."""
    for case in section.get("cases", []):
        err = case.get("error") or ""
        if err and not err.startswith(("out of memory", "skipped")):
            return True
    return any(s.get("status") not in ("ok", "skipped") for s in section.get("steps", []))


def cmd_report(args: argparse.Namespace) -> int:
    from sim.fileio import atomic_write_text

    folder = Path(args.dir)
    data = _read_run(folder / "gpu_check.json")
    report, table, _ = build_report(data, args.gpu)
    atomic_write_text(folder / "report.md", report)
    atomic_write_text(folder / "comparison.csv", table)
    sys.stdout.write(report)
    return 0


def _read_run(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ConfigError("DIR", str(path.parent), f"a folder with the gpu_check.json of a run ({type(err).__name__})") from None
    return check_format(data, str(path))


def cmd_collect(args: argparse.Namespace) -> int:
    """Copy a returned run into DEST/<catalog gpu>/<date>/ and write its report with this tree's model."""
    from sim.fileio import atomic_write_text
    from validation.gpu_report import prediction_gpu

    src = Path(args.dir)
    data = _read_run(src / "gpu_check.json")
    gpu = args.gpu or prediction_gpu(data)
    dest = Path(args.dest) / gpu / data["meta"].get("date", "undated")
    if dest.exists() and any(dest.iterdir()) and not args.replace:
        raise ConfigError("--dest", str(dest), "a folder not holding a run yet (or --replace)")
    dest.mkdir(parents=True, exist_ok=True)
    copied = []
    for path in sorted(src.iterdir()):
        if path.is_file() and path.name not in ("report.md", "comparison.csv"):
            shutil.copy2(path, dest / path.name)
            copied.append(path.name)
    report, table, _ = build_report(data, args.gpu)
    atomic_write_text(dest / "report.md", report)
    atomic_write_text(dest / "comparison.csv", table)
    print(f"gpu_check: {', '.join(copied)} -> {dest}/ with report.md and comparison.csv predicted by this tree")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="gpu_check.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="measure this machine's GPU (or, --dry-run, its CPU) and compare")
    run.add_argument("--out", required=True, metavar="DIR", help="where the four result files go")
    run.add_argument("--budget-s", type=float, default=420.0, metavar="S",
                     help="no new work starts after this many seconds (default 420: the device tool's 10-minute "
                          "command limit, less start-up and a margin)")
    run.add_argument("--dry-run", action="store_true", help="on the CPU, tiny stand-ins, no CUDA calls (CI)")
    run.add_argument("--sections", nargs="+", metavar="NAME", help=f"run only these, of {', '.join(SECTIONS)}")
    run.add_argument("--gpu", metavar="NAME", help="the catalog GPU to predict (default: the device's)")
    report = sub.add_parser("report", help="re-predict a run in DIR with this tree's model")
    report.add_argument("dir", metavar="DIR")
    report.add_argument("--gpu", metavar="NAME", help="the catalog GPU to predict (default: the device's)")
    collect = sub.add_parser("collect", help="file a returned run under DEST/<gpu>/<date>/ and write its report")
    collect.add_argument("dir", metavar="DIR", help="the folder the device tool returned the files into")
    collect.add_argument("--dest", default=str(ROOT / "results" / "gpu"), metavar="DIR")
    collect.add_argument("--gpu", metavar="NAME", help="the catalog GPU to predict (default: the device's)")
    collect.add_argument("--replace", action="store_true", help="overwrite a run already filed for that date")
    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            return cmd_run(args, argv)
        if args.command == "report":
            return cmd_report(args)
        return cmd_collect(args)
    except ConfigError as err:
        print(f"gpu_check.py: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
