"""The probes' tokenizers against Hugging Face's `tokenizers` built from the same vocabulary and merges.

  tokenizer_oracle.py BPE_ENCODE TEXT_FILE gguf FILE.gguf
      byte-level BPE from the GGUF file's tokenizer.ggml.tokens/merges/pre; the same vocabulary saved by
      `tokenizers` as tokenizer.json is read back by the probes' tokenizer.json reader and must agree too
  tokenizer_oracle.py BPE_ENCODE TEXT_FILE files VOCAB_JSON MERGES_TXT
      byte-level BPE (GPT-2's pre-tokenizer) from vocab.json + merges.txt
  tokenizer_oracle.py BPE_ENCODE TEXT_FILE wordpiece TOKENIZER_JSON
      BERT's WordPiece from tokenizer.json, on the text's lines within Latin-1 (the probes strip accents of
      Latin-1 letters only)

Prints the number of ids compared; on a difference, the first line of the text whose ids differ. Exit 0 equal,
1 different, 77 skipped (tokenizers or gguf absent).
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    from tokenizers import Tokenizer, models, pre_tokenizers
except ImportError as error:
    print(f"SKIPPED: {error} (scripts/pyenv installs tokenizers)")
    sys.exit(77)


def ours(binary, text, args):
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", newline="", suffix=".txt", delete=False) as f:
        f.write(text)
    try:
        run = subprocess.run([binary, f.name, *args], capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    if run.returncode != 0:
        raise SystemExit(f"FAIL: bpe_encode {' '.join(args)} exited {run.returncode}: {run.stderr}")
    return [int(x) for x in run.stdout.split()]


def byte_level_tokenizer(vocab, merges, pre):
    tokenizer = Tokenizer(models.BPE(vocab, merges))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "smollm":
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    else:
        tokenizer.pre_tokenizer = byte_level
    return tokenizer


def main(argv):
    binary, text_file, mode = argv[:3]
    text = open(text_file, encoding="utf-8", newline="").read()
    failures = 0
    if mode == "gguf":
        try:
            import gguf
        except ImportError as error:
            print(f"SKIPPED: {error} (scripts/pyenv installs gguf)")
            return 77
        reader = gguf.GGUFReader(argv[3])
        tokens = reader.fields["tokenizer.ggml.tokens"].contents()
        merges = [tuple(m.split(" ")) for m in reader.fields["tokenizer.ggml.merges"].contents()]
        pre = reader.fields["tokenizer.ggml.pre"].contents() if "tokenizer.ggml.pre" in reader.fields else "gpt2"
        if len(set(tokens)) != len(tokens):
            print(f"FAIL: {argv[3]} repeats tokens; the comparison needs a one-to-one vocabulary")
            return 1
        tokenizer = byte_level_tokenizer({t: k for k, t in enumerate(tokens)}, merges, pre)
        theirs = lambda t: tokenizer.encode(t, add_special_tokens=False).ids
        failures += check(f"{os.path.basename(argv[3])} (pre-tokenizer {pre})", binary, text, ["--gguf", argv[3]], theirs)
        with tempfile.TemporaryDirectory() as tmp:
            saved = os.path.join(tmp, "tokenizer.json")
            tokenizer.save(saved)
            failures += check("the same as tokenizer.json", binary, text, ["--tokenizer-json", saved], theirs)
    elif mode == "files":
        vocab = json.load(open(argv[3], encoding="utf-8"))
        lines = open(argv[4], encoding="utf-8").read().split("\n")
        merges = [tuple(line.split(" ")) for line in lines if line and not line.startswith("#version")]
        tokenizer = byte_level_tokenizer(vocab, merges, "gpt2")
        failures += check(f"{os.path.basename(argv[3])} ({len(vocab)} tokens) + {os.path.basename(argv[4])}", binary,
                          text, ["--files", argv[3], argv[4]],
                          lambda t: tokenizer.encode(t, add_special_tokens=False).ids)
    elif mode == "wordpiece":
        latin1 = "".join(line for line in text.splitlines(keepends=True) if all(ord(c) < 0x100 for c in line))
        tokenizer = Tokenizer.from_file(argv[3])
        failures += check(f"WordPiece from {os.path.basename(argv[3])} (Latin-1 lines)", binary, latin1,
                          ["--tokenizer-json", argv[3]], lambda t: tokenizer.encode(t).ids)
    else:
        print(__doc__)
        return 2
    return 1 if failures else 0


def check(name, binary, text, args, theirs_of):
    mine, theirs = ours(binary, text, args), theirs_of(text)
    if mine == theirs:
        print(f"{name}: {len(mine)} ids for {len(text)} characters, equal to tokenizers'")
        return 0
    for line in text.splitlines(keepends=True):
        a, b = ours(binary, line, args), theirs_of(line)
        if a != b:
            print(f"FAIL: {name}: line {line!r}: ours {a}, tokenizers {b}")
            return 1
    print(f"FAIL: {name}: the whole text differs ({len(mine)} ids, tokenizers {len(theirs)}) though every line agrees")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
