"""attncheck.torch.probe on the current transformers (5.x, which needs PyTorch >= 2.6, or 4.57 on PyTorch 2.5: not the
suite's 4.38.2 on Debian's torch 1.13) against `attncheck probe --json` on the checkpoint save_pretrained wrote, for
Llama, Qwen2, Qwen3, Gemma 2, Gemma 3 (text), Mistral, Phi-3, GPT-NeoX, GPT-2 and BERT, with eager and SDPA attention (Gemma 2: eager only, as
transformers allows), and a right-padded batch against the sequence alone; OLMo, OLMo 2 and OLMo 3 in memory against
their own attention and autograd. Run by hand, in a virtual environment
of its own (about 6 GB):

  /usr/bin/python3 -m venv VENV && VENV/bin/pip install torch transformers numpy
  VENV/bin/python tests/python/hf_current_transformers.py BUILD_DIR WORK_DIR

(A venv over Debian's Python whose torchvision is Debian's, built for torch 1.13, must hide it: run the script through
`python -c "import sys, runpy; sys.modules['torchvision'] = None; sys.argv = [...]; runpy.run_path(...)"`.)

transformers computes in float32 inside a float64 model (softmax, RMSNorm, the rotary frequencies): those are
lifted to float64 here, so both sides are double precision. Prints, per family and attention implementation, the
largest relative difference over every field of every row.
"""
import json, os, subprocess, sys, warnings
import torch
torch.set_default_dtype(torch.float64)
_to = torch.Tensor.to
def to64(self, *args, **kwargs):
    args = tuple(torch.float64 if a is torch.float32 else a for a in args)
    if kwargs.get("dtype") is torch.float32:
        kwargs["dtype"] = torch.float64
    return _to(self, *args, **kwargs)
torch.Tensor.to = to64
torch.Tensor.float = lambda self, *a, **k: self.double()
_softmax = torch.nn.functional.softmax
torch.nn.functional.softmax = lambda x, dim=None, _stacklevel=3, dtype=None: _softmax(x, dim=dim)
import transformers
build, work = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(build, "python"))
import attncheck.torch  # noqa: E402
transformers.logging.set_verbosity_error()
binary = os.path.join(build, "cli", "attncheck")
common = dict(vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6, tie_word_embeddings=False)
def configs():
    yield "llama", transformers.LlamaConfig(**common, rope_theta=1000.0)
    yield "qwen2", transformers.Qwen2Config(**common, rope_theta=1000.0)
    yield "qwen3", transformers.Qwen3Config(**common, head_dim=8, rope_theta=1000.0)
    yield "gemma2", transformers.Gemma2Config(**common, head_dim=12, sliding_window=5, query_pre_attn_scalar=10,
                                              attn_logit_softcapping=6.0, final_logit_softcapping=None)
    yield "gemma3", transformers.Gemma3TextConfig(**common, head_dim=12, sliding_window=5, query_pre_attn_scalar=10)
    yield "mistral", transformers.MistralConfig(**common, sliding_window=5, rope_theta=1000.0)
    yield "phi3", transformers.Phi3Config(**common, sliding_window=5, rope_theta=1000.0, pad_token_id=0)
    yield "gpt_neox", transformers.GPTNeoXConfig(vocab_size=50, hidden_size=32, intermediate_size=48,
                                                 num_hidden_layers=3, num_attention_heads=4,
                                                 max_position_embeddings=64, rotary_pct=0.5, rotary_emb_base=1000,
                                                 tie_word_embeddings=False)
    yield "gpt2", transformers.GPT2Config(vocab_size=50, n_embd=32, n_layer=2, n_head=4, n_positions=32)
    yield "bert", transformers.BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                          intermediate_size=64, max_position_embeddings=32)
def exact_rotary_frequencies(model):
    """transformers keeps the rotary frequencies in float32: each replaced by the float64 value it rounds."""
    for module in model.modules():
        for name, buffer in list(module.named_buffers(recurse=False)):
            if "inv_freq" in name:
                dd = 2 * buffer.shape[0]
                cands = [1.0 / (b ** (torch.arange(0, dd, 2, dtype=torch.float64) / dd)) for b in (1000.0, 10000.0, 500000.0, 1000000.0)]
                exact = [e for e in cands if torch.allclose(e, buffer.double(), rtol=1e-6, atol=0)]
                if exact:
                    setattr(module, name, exact[0])
ids = [3, 5, 17, 33, 8, 21, 9, 38, 12, 30, 2, 7]
for family, config in configs():
    torch.manual_seed(0)
    auto = transformers.AutoModel if family in ("gpt2", "bert") else transformers.AutoModelForCausalLM
    model = auto.from_config(config).double()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            p.copy_((0.2 * noise + (0.0 if "gemma" in family else 1.0)) if "norm" in name and name.endswith("weight")
                    else 0.35 * noise)
    folder = os.path.join(work, f"tiny-{family}")
    model.save_pretrained(folder)
    with open(f"{folder}/tokens.txt", "w") as f:
        f.write(" ".join(map(str, ids)) + "\n")
    run = subprocess.run([binary, "probe", folder, "--tokens", f"{folder}/tokens.txt", "--json"], capture_output=True, text=True)
    if run.returncode not in (0, 1):
        print(family, "CLI failed:", run.stderr.strip()[:300]); continue
    cli = json.loads(run.stdout)["heads"]
    for impl in (("eager",) if family == "gemma2" else ("eager", "sdpa")):
        m = auto.from_pretrained(folder, torch_dtype=torch.float64, attn_implementation=impl).eval()
        exact_rotary_frequencies(m)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            rows = attncheck.torch.probe(m, torch.tensor(ids))
        worst = 0.0
        if len(rows) != len(cli):
            print(family, impl, f"{len(rows)} rows vs CLI {len(cli)}", [str(w.message)[:200] for w in caught][:2]); continue
        for a, b in zip(rows, cli):
            for k, v in b.items():
                if isinstance(v, float):
                    worst = max(worst, abs(a[k] - v) / max(abs(v), 1e-300))
        # padded batch: right padding
        pad = {"input_ids": torch.tensor([ids[:8] + [0] * 4, ids]), "attention_mask": torch.tensor([[1] * 8 + [0] * 4, [1] * 12])}
        padded, full = attncheck.torch.probe(m, pad)
        alone = attncheck.torch.probe(m, torch.tensor(ids[:8]))
        worst_pad = max(abs(a[k] - b[k]) / max(abs(b[k]), 1e-300) for a, b in zip(padded, alone) for k in b if isinstance(b[k], float))
        print(f"{family} {impl}: {len(rows)} heads, max relative difference to the CLI {worst:.2e}; padded vs alone {worst_pad:.2e}; warnings {len(caught)}")

# Families the command line does not read, measured in memory only: every head's ||A||_F, ||dA/dW_Q||_F and
# ||dA/dW_K||_F against the model's own attention probabilities (eager) and autograd through each layer's own attention
# module in its whole q_proj and k_proj weights (OLMo 2 and 3 normalize all the heads' queries and keys together, so
# every head's map moves with every head's weights); OLMo with clip_qkv must be refused with its reason.
olmo = dict(common, rope_theta=1000.0, pad_token_id=0)
families = [("olmo", transformers.OlmoConfig(**olmo), None),
            ("olmo-clip", transformers.OlmoConfig(**olmo, clip_qkv=0.5), "clip_qkv"),
            ("olmo2", transformers.Olmo2Config(**olmo), None)]
if hasattr(transformers, "Olmo3Config"):
    families.append(("olmo3", transformers.Olmo3Config(**olmo, sliding_window=5), None))
for family, config, refused in families:
    torch.manual_seed(0)
    m = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").double().eval()
    exact_rotary_frequencies(m)
    # Weights 4 times their initial size: attention far from uniform, no row saturated (at 10 times, a head whose
    # ||dA/dW_K||_F is 4e-5 saturates, and autograd's own rounding there is 2.7e-10 of it).
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = attncheck.torch.probe(m, torch.tensor(ids))
    if refused is not None:
        said = [str(w.message) for w in caught if refused in str(w.message)]
        print(f"{family}: {len(rows)} rows, refused with its reason on {len(said)} layers: {said[:1]}")
        continue
    calls = []
    hooks = [layer.self_attn.register_forward_pre_hook(lambda module, args, kwargs: calls.append((module, args, kwargs)),
                                                       with_kwargs=True) for layer in m.model.layers]
    with torch.no_grad():
        m(torch.tensor(ids)[None], use_cache=False)  # a cache would grow with every call below
    for hook in hooks:
        hook.remove()
    worst, where, heads = 0.0, "", config.num_attention_heads
    for layer, (module, args, kwargs) in enumerate(calls):
        weights = (module.q_proj.weight.detach(), module.k_proj.weight.detach())

        def attention(w_q, w_k):
            return torch.func.functional_call(module, {"q_proj.weight": w_q, "k_proj.weight": w_k}, args, kwargs)[1][0]

        jacobian_q, jacobian_k = torch.autograd.functional.jacobian(attention, weights)
        with torch.no_grad():
            a = attention(*weights)
        for h in range(heads):
            row = rows[layer * heads + h]
            assert (row["layer"], row["head"]) == (layer, h)
            for key, value in (("softmax_fro", a[h].norm()), ("dWq_fro", jacobian_q[h].norm()),
                               ("dWk_fro", jacobian_k[h].norm())):
                if abs(row[key] - float(value)) / float(value) > worst:
                    worst = abs(row[key] - float(value)) / float(value)
                    where = f"layer {layer} head {h} {key}: {row[key]:.10g} against {float(value):.10g}"
    print(f"{family}: {len(rows)} heads, ||A||_F, ||dA/dW_Q||_F and ||dA/dW_K||_F against the model's own attention "
          f"and autograd: max relative difference {worst:.2e} ({where}); warnings {len(caught)}")
