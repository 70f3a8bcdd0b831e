#!/usr/bin/env python3
"""A synthetic `srun --label` log of one training step at RANKS ranks, for bench/fold.sh: what
`jobkit fold` reads. Each rank says, in order: a config dump (the same on every rank: flat lines and
an indented block), framework warnings (two-line blocks, a line and its indented source line) on
every rank or on all but a few, NCCL INFO lines that differ only in their numbers (host, pid,
device), then training steps: a line of its own per rank and step (`rank R step S loss 0.2xx ...`),
every 10 steps a summary every rank prints alike, every 50 a checkpoint line, now and then a warning
on a few ranks; at the end a Python traceback (an indented block, then the exception line) on one
node's ranks and a few others, and a watchdog error on the rest. Then srun's own two unlabelled
lines, as `srun --label ... 2>&1` shows them.

Interleaved as srun delivers it: in each round every rank that has lines left writes its next one,
in an order shuffled per round; now and then a rank stalls for 1 to 5 rounds and then writes up to 3
lines a round until it has caught up. Labels are right-aligned to the width of the largest rank
number ("  3: ", "511: "), as srun writes them. The same RANKS, LINES_PER_RANK and SEED give the same
bytes. Counts go to stderr.

usage: fold_log.py RANKS LINES_PER_RANK SEED > LOG
"""
import random
import sys

TASKS_PER_NODE = 8

CONFIG_FLAT = [
    "GPU available: True (cuda), used: True",
    "TPU available: False, using: 0 TPU cores",
    "HPU available: False, using: 0 HPUs",
    "Using bfloat16 Automatic Mixed Precision (AMP)",
    "Loading config from /work/configs/llama-7b-pretrain.yaml",
]
CONFIG_BLOCK = [
    "config:",
    "  run_name: llama-7b-pretrain-v3",
    "  seed: 1234",
    "  model:",
    "    name: llama-7b",
    "    hidden_size: 4096",
    "    intermediate_size: 11008",
    "    num_attention_heads: 32",
    "    num_hidden_layers: 32",
    "    max_position_embeddings: 4096",
    "    rope_theta: 10000.0",
    "    vocab_size: 32000",
    "  optimizer:",
    "    name: adamw",
    "    lr: 3.0e-4",
    "    betas: [0.9, 0.95]",
    "    weight_decay: 0.1",
    "    warmup_steps: 2000",
    "  data:",
    "    path: /datasets/redpajama/tokenized",
    "    seq_len: 4096",
    "    micro_batch_size: 4",
    "    num_workers: 16",
    "  parallel:",
    "    strategy: fsdp",
    "    sharding: full_shard",
    "    activation_checkpointing: true",
    "  checkpoint:",
    "    dir: /ckpt/llama-7b-pretrain-v3",
    "    every_steps: 50",
]
WARN_ALL = [
    "/opt/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py:558: UserWarning: This "
    "DataLoader will create 16 worker processes in total. Our suggested max number of worker in "
    "current system is 12, which is smaller than what this DataLoader is going to create. Please be "
    "aware that excessive worker creation might get DataLoader running slow or even freeze, lower "
    "the worker number to avoid potential slowness/freeze if necessary.",
    "  warnings.warn(_create_warning_msg(",
]
WARN_MOST = [
    "/opt/venv/lib/python3.11/site-packages/torch/distributed/fsdp/_init_utils.py:440: UserWarning: "
    "FSDP is switching to use `NO_SHARD` instead of ShardingStrategy.FULL_SHARD since the world size "
    "is 1.",
    "  warnings.warn(",
]
WARN_SOME = [
    "[W reducer.cpp:1360] Warning: find_unused_parameters=True was specified in DDP constructor, but "
    "did not find any unused parameters in the forward pass. (function operator())",
]
TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/work/train.py", line 412, in <module>',
    "    main()",
    '  File "/work/train.py", line 398, in main',
    "    loss = train_step(model, batch, step)",
    '  File "/work/train.py", line 287, in train_step',
    "    loss.backward()",
    '  File "/opt/venv/lib/python3.11/site-packages/torch/_tensor.py", line 522, in backward',
    "    torch.autograd.backward(",
    '  File "/opt/venv/lib/python3.11/site-packages/torch/autograd/__init__.py", line 266, in backward',
    "    Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass",
]


def host(rank):
    return f"gpu-n{rank // TASKS_PER_NODE:04d}"


def rank_lines(rank, ranks, lines_per_rank, seed, shared):
    """Rank's lines in the order it writes them (a generator: 4096 ranks need not be in memory)."""
    rng = random.Random(seed * 1_000_003 + rank)
    local = rank % TASKS_PER_NODE
    pid = 20000 + rng.randrange(40000)
    nccl = f"{host(rank)}:{pid}:{pid} [{local}] NCCL INFO"
    yield f"{host(rank)} local_rank {local} pid {pid} device cuda:{local}"
    yield from CONFIG_FLAT
    yield from CONFIG_BLOCK
    yield from WARN_ALL
    if rank not in shared["no_warn_most"]:
        yield from WARN_MOST
    node = rank // TASKS_PER_NODE
    comm = f"rank {rank} nranks {ranks} cudaDev {local} busId {0x18 + 0x10 * local:x}000"
    yield f"{nccl} Bootstrap : Using ib0:10.1.{node // 256}.{node % 256}<0>"
    yield (f"{nccl} NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open "
           "shared object file")
    yield f"{nccl} NET/IB : Using [0]mlx5_{local}:1/IB ; OOB ib0:10.1.{node // 256}.{node % 256}<0>"
    yield f"{nccl} Using network IB"
    yield f"{nccl} comm 0x{rng.getrandbits(40):x} {comm} - Init START"
    yield f"{nccl} Setting affinity for GPU {local} to {0xff << (8 * (local // 4)):x}"
    for ch in range(4):
        yield f"{nccl} Channel {ch:02d}/04 :    0   1   2   3   4   5   6   7"
    yield f"{nccl} Trees [0] {rank + 1 if rank + 1 < ranks else -1}/-1/-1->{rank}->{rank - 1 if rank else -1}"
    yield f"{nccl} comm 0x{rng.getrandbits(40):x} {comm} - Init COMPLETE"
    written = 1 + len(CONFIG_FLAT) + len(CONFIG_BLOCK) + len(WARN_ALL) + 11
    written += 0 if rank in shared["no_warn_most"] else len(WARN_MOST)
    failing = rank in shared["failing"]
    tail = len(TRACEBACK) + 1 if failing else 1
    step = 0
    while written + tail < lines_per_rank:
        step += 1
        loss = 0.2 + 0.1 * rng.random()
        yield (f"rank {rank} step {step} loss {loss:.3f} lr {3e-4 * min(1, step / 2000):.3e} "
               f"grad_norm {0.5 + rng.random():.3f} tokens/s {30000 + rng.randrange(4000)}")
        written += 1
        if step % 10 == 0:
            yield (f"step {step}: mean loss {shared['mean_loss'][step // 10 % len(shared['mean_loss'])]:.4f} "
                   f"throughput {shared['throughput']:.2f} M tokens/s")
            written += 1
        if step % 50 == 0:
            yield f"Saving checkpoint to /ckpt/llama-7b-pretrain-v3/step_{step:06d}"
            written += 1
        if step in shared["warn_some_steps"] and rank in shared["warn_some_steps"][step]:
            yield from WARN_SOME
            written += len(WARN_SOME)
    if failing:
        yield from TRACEBACK
        yield (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {local} has a "
               f"total capacity of 79.15 GiB of which {0.5 + rng.random():.2f} GiB is free. Process {pid} "
               f"has 78.0{local} GiB memory in use.")
    else:
        yield (f"[rank{rank}]:[E ProcessGroupNCCL.cpp:1537] [PG 0 Rank {rank}] Process group watchdog "
               f"thread terminated with exception: NCCL error: remote process exited or there was a "
               f"network error, NCCL version 2.21.5")


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: fold_log.py RANKS LINES_PER_RANK SEED > LOG")
    ranks, lines_per_rank, seed = (int(a) for a in sys.argv[1:])
    rng = random.Random(seed)
    # What every rank shares: which ranks lack a warning, which fail, who warns at which step.
    nodes = (ranks + TASKS_PER_NODE - 1) // TASKS_PER_NODE
    bad_node = rng.randrange(nodes)
    failing = set(range(bad_node * TASKS_PER_NODE, min(ranks, (bad_node + 1) * TASKS_PER_NODE)))
    failing |= set(rng.sample(range(ranks), max(1, ranks // 200)))
    steps = range(1, max(2, lines_per_rank))
    shared = {
        "no_warn_most": set(rng.sample(range(ranks), max(1, ranks // 100))),
        "failing": failing,
        "warn_some_steps": {s: set(rng.sample(range(ranks), rng.randint(1, max(1, ranks // 16))))
                            for s in rng.sample(steps, min(20, len(steps)))},
        "mean_loss": [0.25 + 0.01 * rng.random() for _ in range(64)],
        "throughput": 30.0 * ranks / 1000,
    }
    width = len(str(ranks - 1))
    labels = [f"{r:>{width}}: " for r in range(ranks)]
    sources = [rank_lines(r, ranks, lines_per_rank, seed, shared) for r in range(ranks)]
    active = list(range(ranks))
    stalled = [0] * ranks  # rounds a rank still stays silent
    behind = [0] * ranks   # lines it owes from rounds it was silent in
    out = sys.stdout
    lines = 0
    while active:
        rng.shuffle(active)
        chunk = []
        done = []
        for r in active:
            if stalled[r]:
                stalled[r] -= 1
                behind[r] += 1
                continue
            if rng.random() < 0.002:
                stalled[r] = rng.randint(0, 4)
                behind[r] += 1
                continue
            n = 1 + min(behind[r], 2)
            behind[r] -= n - 1
            for _ in range(n):
                text = next(sources[r], None)
                if text is None:
                    done.append(r)
                    break
                chunk.append(labels[r] + text + "\n")
        lines += len(chunk)
        out.write("".join(chunk))
        if done:
            finished = set(done)
            active = [r for r in active if r not in finished]
    first, last = bad_node * TASKS_PER_NODE, min(ranks, (bad_node + 1) * TASKS_PER_NODE) - 1
    tasks = f"task {first}" if first == last else f"tasks {first}-{last}"
    out.write(f"srun: error: {host(first)}: {tasks}: Exited with exit code 1\n")
    out.write("srun: Terminating StepId=4242.0\n")
    lines += 2
    out.flush()
    print(f"fold_log.py: {ranks} ranks, {lines} lines, {len(failing)} ranks with a traceback",
          file=sys.stderr)


if __name__ == "__main__":
    main()
