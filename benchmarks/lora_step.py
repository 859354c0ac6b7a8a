"""One optimiser step of the multi-round router's policy, side by side: LoRA against full
fine-tuning, activation checkpointing on and off, on the device at hand (issue 28).

``ltrr.agent.lora.device_args`` turns activation (gradient) checkpointing off on a CPU, where
memory is not the limit, and leaves it on elsewhere, as TRL does by default. This measures what
that costs and saves on a GPU: seconds per step and peak device memory for each of the four
combinations, at the GPU config's micro-batch (`demo-agent-gpu`: 8 sequences) and the length of a
rollout with its observations (about 900 tokens).

The model has SmolLM2-135M-Instruct's architecture, read from the packaged GGUF's metadata
(30 layers, width 576, 9 heads of which 3 key/value, feed-forward 1536, vocabulary 49,152, tied
embeddings) with weights drawn from the config's initialiser and a fixed seed: the time and the
memory of a step do not depend on the weights' values, and no weights need to travel to the
device. The LoRA adapter is the policies' default (rank 8, alpha 32, dropout 0, all linear
layers; ``ltrr.agent.lora``). The optimiser is AdamW, in float32 as the trainers run.

    python benchmarks/lora_step.py --device cuda --out results.json     # a GPU
    python benchmarks/lora_step.py --device cpu --batch 1 --length 128 --steps 1 --warmup 0

Each combination runs its warm-up steps, then ``--steps`` timed steps (synchronised on a GPU).
"""

from __future__ import annotations

import argparse
import json
import time


def smollm2_135m_config():
    """SmolLM2-135M-Instruct's architecture (the packaged GGUF's ``llama.*`` metadata)."""
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                       num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                       rope_parameters={"rope_type": "default", "rope_theta": 100000.0}, rms_norm_eps=1e-5, tie_word_embeddings=True)


def measure(adapter: str, checkpointing: bool, *, device: str, batch: int, length: int, steps: int,
            warmup: int, seed: int) -> dict:
    """Seconds per optimiser step and peak memory of one combination."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(smollm2_135m_config()).to(device)  # type: ignore[arg-type]  # transformers stubs mistype .to
    if adapter == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=32, lora_dropout=0.0,
                                                 target_modules="all-linear", task_type="CAUSAL_LM"))
    if checkpointing:
        # transformers' current name where the installed version has it (the old one goes in 6)
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if adapter == "lora":
            model.enable_input_require_grads()
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5)
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 49152, (batch, length), generator=gen).to(device)
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(warmup + steps):
        start = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
    del model, opt
    if cuda:
        torch.cuda.empty_cache()
    return {"adapter": adapter, "checkpointing": checkpointing, "trainable": sum(p.numel() for p in params),
            "s_per_step": sum(times) / len(times), "steps": steps, "peak_gib": peak}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--length", type=int, default=900)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="a JSON file for the rows")
    args = ap.parse_args(argv)
    import torch

    rows = []
    for adapter in ("lora", "full"):
        for ckpt in (False, True):
            rows.append(measure(adapter, ckpt, device=args.device, batch=args.batch, length=args.length,
                                steps=args.steps, warmup=args.warmup, seed=args.seed))
            r = rows[-1]
            peak = "-" if r["peak_gib"] is None else f"{r['peak_gib']:.2f}"
            print(f"| {adapter} | {'on' if ckpt else 'off'} | {r['trainable']:,} | {r['s_per_step']:.3f} | {peak} |",
                  flush=True)
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    record = {"device": device, "torch": torch.__version__, "batch": args.batch, "length": args.length,
              "seed": args.seed, "rows": rows}
    if args.out:
        from ltrr.data.io import write_text_atomic

        write_text_atomic(args.out, json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
