#!/usr/bin/python3
"""Cost of attncheck's AttentionRecorder in the digits example's training (examples/train_digits.py), measured
as a ratio in one run: the same model and batches trained with and without the recorder (every 10 steps, all
2 layers x 4 heads, N = 65), in alternating blocks of steps (ABBA order, so that drift of the machine's speed
cancels). The overhead is the mean over blocks of (time with / time without) - 1, with its standard error
over blocks (on a shared machine that difference is noisy, so the median over blocks is shown too), and,
measured directly in the same run, the time spent inside the recorder (measuring the heads and writing the log)
per training step over the time of a step without the recorder. The goal is at most 5% of a training
step: met when the directly timed overhead is at most 5% and the end-to-end difference is not significantly
above it (z < 2).

  /usr/bin/python3 bench/python/recorder_overhead.py [BUILD_DIR] [--blocks 12] [--steps-per-block 40]
                                                     [--every 10] [--activation softmax] [--model digits]

--model llama trains a Hugging Face LlamaForCausalLM instead (4 layers x 8 query heads sharing 4 key/value heads,
hidden 256, rotary positions, batch 8 of N = 128 tokens, float32, causal language-model loss), recorded with no
adapter: the recorder recognises its attention layers. It needs transformers: run it with the interpreter of
`scripts/pyenv build/cache transformers`.
"""
import argparse
import math
import os
import statistics
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("build", nargs="?", default=os.path.join(here, "..", "..", "build"))
    parser.add_argument("--blocks", type=int, default=12)
    parser.add_argument("--steps-per-block", type=int, default=40)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--activation", default="softmax", choices=["softmax", "poly3_scaled", "poly3"])
    parser.add_argument("--model", default="digits", choices=["digits", "llama"])
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(os.path.abspath(args.build), "python"))
    import torch
    from attncheck.torch import AttentionRecorder

    torch.set_num_threads(1)  # as the example trains
    workload = digits_workload(torch, args) if args.model == "digits" else llama_workload(torch)

    inside_recorder = [0.0]

    def timed(method):
        def call(*a, **k):
            start = time.perf_counter()
            try:
                return method(*a, **k)
            finally:
                inside_recorder[0] += time.perf_counter() - start
        return call

    def arm(recorded, log):
        torch.manual_seed(0)
        model = workload["model"]()
        recorder = None
        if recorded:
            recorder = AttentionRecorder(model, every=args.every, out=log)
            # The model's hooks call these through the instance; step counting itself is a few attribute updates.
            for name in ("_measure", "_flush"):
                setattr(recorder, name, timed(getattr(recorder, name)))
            workload["register"](model, recorder)
            if not recorder.layers:
                raise SystemExit("the recorder measures no layer of the model")
        return model, torch.optim.Adam(model.parameters(), lr=3e-3), recorder

    def run_block(model, optimizer, recorder, batches):
        start = time.perf_counter()
        for batch in batches:
            workload["step"](model, optimizer, recorder, batch)
        return time.perf_counter() - start

    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "attncheck-probe.jsonl")
        plain, recorded = arm(False, None), arm(True, log)
        # The same batches for both; one warm-up block each.
        blocks = [[workload["batch"]() for _ in range(args.steps_per_block)] for _ in range(args.blocks + 1)]
        run_block(*plain, blocks[0])
        run_block(*recorded, blocks[0])
        inside_recorder[0] = 0.0
        ratios, plain_times, recorded_times = [], [], []
        for k, batches in enumerate(blocks[1:]):
            order = (plain, recorded) if k % 2 == 0 else (recorded, plain)
            seconds = {id(a): run_block(*a, batches) for a in order}
            plain_times.append(seconds[id(plain)])
            recorded_times.append(seconds[id(recorded)])
            ratios.append(recorded_times[-1] / plain_times[-1])
        recorded[2].close()
        lines = sum(1 for _ in open(log))
    steps = args.blocks * args.steps_per_block
    overhead = statistics.fmean(ratios) - 1
    se = statistics.stdev(ratios) / math.sqrt(len(ratios))
    step_ms = 1e3 * sum(plain_times) / steps
    direct = inside_recorder[0] / sum(plain_times)
    median = statistics.median(ratios) - 1
    print(f"{workload['what']}, one thread; {args.blocks} blocks of {args.steps_per_block} steps per arm (after a "
          f"warm-up block), ABBA order")
    print(f"training step without the recorder: {step_ms:.3f} ms; with it (every {args.every} steps): "
          f"{1e3 * sum(recorded_times) / steps:.3f} ms; {lines} log lines written")
    print(f"end-to-end overhead: {100 * overhead:+.2f}% +- {100 * se:.2f}% (mean over blocks, standard error), "
          f"median {100 * median:+.2f}%")
    print(f"time inside the recorder: {100 * direct:.2f}% of a training step "
          f"({1e3 * inside_recorder[0] / (steps / args.every):.2f} ms per recorded step)")
    goal = 0.05
    z = (overhead - goal) / se
    met = direct <= goal and z < 2
    print(f"goal <= {100 * goal:.0f}%: {'met' if met else 'NOT met'} (end-to-end z = {z:+.1f} against the goal)")
    return 0 if met else 1

def digits_workload(torch, args):
    sys.path.insert(0, os.path.join(here, "..", "..", "examples"))
    import train_digits
    tokens, labels, train, _ = train_digits.digit_tokens(0)
    x_train, y_train = torch.tensor(tokens[train]), torch.tensor(labels[train])
    draws = train_digits.batches(0, len(x_train), 64)

    def register(model, recorder):
        for block in model.blocks:
            recorder.register(block["attention"], train_digits.recorded_inputs)

    def step(model, optimizer, recorder, batch):
        train_digits.train_step(model, optimizer, recorder, x_train[batch], y_train[batch])

    return dict(what=f"digits training ({args.activation}), batch 64, N = 65, 2 layers x 4 heads",
                model=lambda: train_digits.Encoder(args.activation), register=register, step=step,
                batch=lambda: torch.tensor(next(draws)))


def llama_workload(torch):
    import transformers
    transformers.logging.set_verbosity_error()
    config = transformers.LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                                      num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=256)
    generator = torch.Generator().manual_seed(1)

    def step(model, optimizer, recorder, batch):
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if recorder is not None:
            recorder.step()

    return dict(what="Hugging Face Llama training (transformers " + transformers.__version__ + "), batch 8, N = 128, "
                "4 layers x 8 heads (4 key/value heads), rotary", model=lambda: transformers.LlamaForCausalLM(config),
                register=lambda model, recorder: None, step=step,
                batch=lambda: torch.randint(0, 1000, (8, 128), generator=generator))


if __name__ == "__main__":
    sys.exit(main())
