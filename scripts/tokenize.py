"""Tokenize a text corpus for `data.name: tokens` (data/TokenFile.h).

    tokenize.py --input PATH [PATH ...] --out-dir DIR [--vocab-size 512]
                [--eval-fraction 0.1] [--min-frequency 2]

Trains a byte-level BPE tokenizer (the `tokenizers` package, as GPT-2 and
Llama-style models use) on the training part of the text, offline, and
writes into DIR:
- train.bin, eval.bin: the token ids in llm.c's layout (a header of 256
  int32: magic 20240520, version 1 = uint16 ids / 2 = uint32 for
  vocabularies over 65,536, the token count; then the ids, little-endian);
- tokenizer.json: the tokenizer (tokenizers.Tokenizer.from_file reads it).
Inputs: files, or folders read recursively in name order; binary files (with
NUL bytes, such as the fortune .dat indexes) are skipped. The last
--eval-fraction of the text (cut at a line break) is held out for eval.bin
and never seen by the tokenizer's training. Files appear only when all are
written (each written to a temporary name, then renamed).
"""
import argparse
import os
import sys

import numpy as np

MAGIC, HEADER_INTS = 20240520, 256


def fail(message):
    print(f"tokenize.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def read_texts(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            for root, _, names in sorted(os.walk(p)):
                files += [os.path.join(root, n) for n in sorted(names)]
        elif os.path.isfile(p):
            files.append(p)
        else:
            fail(f"--input {p} is neither a file nor a folder")
    texts = []
    for f in files:
        data = open(f, "rb").read()
        if b"\0" in data or not data:
            continue
        texts.append(data.decode("utf-8", errors="replace"))
    if not texts:
        fail(f"no text files under {' '.join(paths)}")
    return "".join(texts)


def write_tokens(path, ids, vocab_size):
    dtype, version = (np.uint16, 1) if vocab_size <= 65536 else (np.uint32, 2)
    header = np.zeros(HEADER_INTS, dtype=np.int32)
    header[0], header[1], header[2] = MAGIC, version, len(ids)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(header.astype("<i4").tobytes())
        f.write(np.asarray(ids, dtype=dtype).astype(np.dtype(dtype).newbyteorder("<")).tobytes())
    return tmp


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--input", nargs="+", required=True)
    p.add_argument("--out-dir", required=True)
    p.add_argument("--vocab-size", type=int, default=512)
    p.add_argument("--eval-fraction", type=float, default=0.1)
    p.add_argument("--min-frequency", type=int, default=2)
    a = p.parse_args()
    if a.vocab_size < 257 or a.vocab_size > 2**32:
        fail(f"--vocab-size must be in [257, 2^32] (256 bytes + merges), got {a.vocab_size}")
    if not 0 < a.eval_fraction < 1:
        fail(f"--eval-fraction must be in (0, 1), got {a.eval_fraction}")
    try:
        from tokenizers import ByteLevelBPETokenizer
    except ImportError:
        fail("the tokenizers package is missing (scripts/setup.sh installs it: pip install tokenizers)")
    text = read_texts(a.input)
    cut = text.rfind("\n", 0, int(len(text) * (1 - a.eval_fraction))) + 1
    if cut <= 0 or cut >= len(text):
        fail("the text is too short to hold out --eval-fraction of it at a line break")
    train_text, eval_text = text[:cut], text[cut:]
    tok = ByteLevelBPETokenizer()
    chunks = train_text.split("\n")
    tok.train_from_iterator(chunks, vocab_size=a.vocab_size, min_frequency=a.min_frequency, show_progress=False,
                            special_tokens=["<|endoftext|>"])
    vocab = tok.get_vocab_size()
    os.makedirs(a.out_dir, exist_ok=True)
    written = []
    for name, part in (("train.bin", train_text), ("eval.bin", eval_text)):
        ids = tok.encode(part).ids
        written.append((os.path.join(a.out_dir, name), write_tokens(os.path.join(a.out_dir, name), ids, vocab)))
        print(f"tokenize.py: {name}: {len(ids)} tokens from {len(part.encode())} bytes "
              f"({len(part.encode()) / max(1, len(ids)):.2f} bytes per token)")
    tmp = os.path.join(a.out_dir, "tokenizer.json.tmp")
    tok._tokenizer.save(tmp)
    written.append((os.path.join(a.out_dir, "tokenizer.json"), tmp))
    for final, tmp in written:
        os.replace(tmp, final)
    print(f"tokenize.py: byte-level BPE, vocabulary {vocab} (set model.vocab_size >= {vocab}); wrote "
          f"{', '.join(f for f, _ in written)}")


if __name__ == "__main__":
    main()
