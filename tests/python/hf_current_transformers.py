"""attncheck.torch.probe on the current transformers (5.x, which needs PyTorch >= 2.6, or 4.57 on PyTorch 2.5: not the
suite's 4.38.2 on Debian's torch 1.13) against `attncheck probe --json` on the checkpoint save_pretrained wrote, for
Llama, Qwen2, Qwen3, Gemma 2, Gemma 3 (text), Mistral, Phi-3, GPT-NeoX, GPT-2 and BERT, with eager and SDPA attention (Gemma 2: eager only, as
transformers allows), and a right-padded batch against the sequence alone. Run by hand, in a virtual environment
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
        # transformers keeps the rotary frequencies in float32: each replaced by the float64 value it rounds.
        d = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads if hasattr(config, "num_attention_heads") else 0
        for module in m.modules():
            for name, buffer in list(module.named_buffers(recurse=False)):
                if "inv_freq" in name:
                    dd = 2 * buffer.shape[0]
                    cands = [1.0 / (b ** (torch.arange(0, dd, 2, dtype=torch.float64) / dd)) for b in (1000.0, 10000.0, 1000000.0)]
                    exact = [e for e in cands if torch.allclose(e, buffer.double(), rtol=1e-6, atol=0)]
                    if exact:
                        setattr(module, name, exact[0])
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

# Families the command line does not read, measured in memory only: every head's ||A||_F against the model's own
# attention probabilities (output_attentions, eager); OLMo with clip_qkv and OLMo 2 (RMSNorms over all the heads'
# queries and keys together) must be refused with their reason.
olmo = dict(common, rope_theta=1000.0, pad_token_id=0)
for family, config, refused in (("olmo", transformers.OlmoConfig(**olmo), None),
                                ("olmo-clip", transformers.OlmoConfig(**olmo, clip_qkv=0.5), "clip_qkv"),
                                ("olmo2", transformers.Olmo2Config(**olmo), "not an RMSNorm over the head's")):
    torch.manual_seed(0)
    m = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").double().eval()
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(10)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = attncheck.torch.probe(m, torch.tensor(ids))
    if refused is not None:
        said = [str(w.message) for w in caught if refused in str(w.message)]
        print(f"{family}: {len(rows)} rows, refused with its reason on {len(said)} layers: {said[:1]}")
        continue
    with torch.no_grad():
        attentions = m(torch.tensor(ids)[None], output_attentions=True).attentions
    worst = max(abs(r["softmax_fro"] - float(attentions[r["layer"]][0, r["head"]].norm())) / r["softmax_fro"]
                for r in rows)
    print(f"{family}: {len(rows)} heads, ||A||_F against the model's own attention: max relative difference {worst:.2e}")
